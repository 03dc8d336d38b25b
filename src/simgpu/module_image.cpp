// Reading nvcc images: cubin (ELF), fatbin (a container of ELF/PTX entries, possibly compressed)
// and PTX text. We need only names: kernels (to fail unknown lookups as a real GPU does) and
// global variables with their sizes and initial bytes (cudaMemcpyToSymbol, cuModuleGetGlobal).
// Compressed fatbin entries (nvcc 13 compresses with zstd when it pays, older ones with LZ4)
// are inflated through the system's libzstd.so.1 / liblz4.so.1, loaded on first need, so
// the driver has no link-time dependency on them.
#include <dlfcn.h>
#include <elf.h>

#include <cstring>
#include <string_view>
#include <vector>

#include "module_image.h"
#include "sim.h"

namespace simgpu {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint32_t kFatbinWrapperMagic = 0x466243b1;
constexpr uint64_t kEntryLz4 = 0x2000, kEntryZstd = 0x8000;

// One fatbin entry header, as laid out by nvcc (fields we do not use are left unnamed).
struct FatbinEntry {
  uint16_t kind;  // 1 PTX, 2 ELF
  uint16_t version;
  uint32_t header_size;
  uint64_t padded_payload_size;
  uint32_t compressed_size;
  uint32_t unused0[2];
  uint32_t arch;  // sm_XY as 10 * X + Y
  uint32_t unused2[2];
  uint64_t flags;
  uint64_t unused1;
  uint64_t uncompressed_size;
};
static_assert(sizeof(FatbinEntry) == 64, "fatbin entry header");

// Inflates a compressed entry with the system library, or returns false.
bool inflate(const FatbinEntry& e, const unsigned char* body, std::string& out) {
  static void* zstd = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  static void* lz4 = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
  size_t in = e.compressed_size ? e.compressed_size : e.padded_payload_size;
  out.assign(e.uncompressed_size, '\0');
  if ((e.flags & kEntryZstd) && zstd) {
    using Fn = size_t (*)(void*, size_t, const void*, size_t);
    using IsError = unsigned (*)(size_t);
    auto fn = reinterpret_cast<Fn>(dlsym(zstd, "ZSTD_decompress"));
    auto is_error = reinterpret_cast<IsError>(dlsym(zstd, "ZSTD_isError"));
    if (!fn || !is_error) return false;
    size_t n = fn(out.data(), out.size(), body, in);
    if (is_error(n)) return false;
    out.resize(n);
    return true;
  }
  if ((e.flags & kEntryLz4) && lz4) {
    using Fn = int (*)(const char*, char*, int, int);
    auto fn = reinterpret_cast<Fn>(dlsym(lz4, "LZ4_decompress_safe"));
    if (!fn) return false;
    int n = fn(reinterpret_cast<const char*>(body), out.data(), static_cast<int>(in), static_cast<int>(out.size()));
    if (n < 0) return false;
    out.resize(static_cast<size_t>(n));
    return true;
  }
  return false;
}

}  // namespace

// Kernels are STT_FUNC symbols marked as entries in st_other (device functions are not);
// globals are object symbols (STT_OBJECT, or CUDA's processor-specific 13) defined in
// .nv.global (zero-initialised) or .nv.global.init / .nv.constant* (with bytes).
constexpr unsigned char kStoCudaEntry = 0x10;
constexpr unsigned char kSttCudaObject = 13;

void read_elf(const unsigned char* p, size_t size, ImageInfo& out) {
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(p, ELFMAG, SELFMAG) != 0 || p[EI_CLASS] != ELFCLASS64) return;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
  if (eh->e_shoff == 0 || eh->e_shoff + static_cast<size_t>(eh->e_shnum) * sizeof(Elf64_Shdr) > size) return;
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(p + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr& strtab = sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > size || strtab.sh_offset + strtab.sh_size > size) continue;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(p + sh[i].sh_offset);
    size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
    for (size_t k = 0; k < n; ++k) {
      const Elf64_Sym& s = syms[k];
      if (s.st_name >= strtab.sh_size) continue;
      const char* raw = reinterpret_cast<const char*>(p + strtab.sh_offset + s.st_name);
      std::string name(raw, strnlen(raw, strtab.sh_size - s.st_name));
      if (name.empty()) continue;
      unsigned type = ELF64_ST_TYPE(s.st_info);
      if (type == STT_FUNC && (s.st_other & kStoCudaEntry)) {
        out.kernels.insert(name);
      } else if ((type == STT_OBJECT || type == kSttCudaObject) && s.st_size > 0 && s.st_shndx != SHN_UNDEF &&
                 s.st_shndx < eh->e_shnum) {
        GlobalVar g;
        g.size = s.st_size;
        const Elf64_Shdr& where = sh[s.st_shndx];
        if (where.sh_type != SHT_NOBITS && where.sh_offset + s.st_value + s.st_size <= size)
          g.init.assign(reinterpret_cast<const char*>(p + where.sh_offset + s.st_value), s.st_size);
        out.globals[name] = std::move(g);
      }
    }
  }
}

// A module-scope variable's declaration at the start of `line`, as PTX writes it:
// `[.visible|.extern] (.global|.const) [.align N] .<b|s|u|f><bits> name[[count]]`. Scanned by
// hand: std::regex over the PTX of vLLM's and FlashInfer's libraries (megabytes each) cost a
// vLLM start about 20 s of CPU.
bool read_ptx_variable(std::string_view line, std::string& name, size_t& bytes) {
  auto skip_space = [&] {
    size_t n = line.find_first_not_of(" \t\r");
    line.remove_prefix(n == std::string_view::npos ? line.size() : n);
  };
  auto word = [&](std::string_view w) {  // `w` then whitespace
    if (line.substr(0, w.size()) != w || line.size() == w.size() || (line[w.size()] != ' ' && line[w.size()] != '\t'))
      return false;
    line.remove_prefix(w.size());
    skip_space();
    return true;
  };
  auto digits = [&](size_t& value) {
    size_t n = 0;
    value = 0;
    while (n < line.size() && line[n] >= '0' && line[n] <= '9') value = value * 10 + size_t(line[n++] - '0');
    line.remove_prefix(n);
    return n > 0;
  };
  skip_space();
  if (!word(".visible")) word(".extern");
  if (!word(".global") && !word(".const")) return false;
  if (word(".align")) {
    size_t align;
    if (!digits(align)) return false;
    skip_space();
  }
  if (line.size() < 2 || line[0] != '.' || std::strchr("bsuf", line[1]) == nullptr || line[1] == '\0') return false;
  line.remove_prefix(2);
  size_t bits;
  if (!digits(bits) || line.empty() || (line[0] != ' ' && line[0] != '\t')) return false;
  skip_space();
  auto ident = [](char c, bool first) {
    return c == '_' || c == '$' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (!first && c >= '0' && c <= '9');
  };
  size_t n = 0;
  while (n < line.size() && ident(line[n], n == 0)) ++n;
  if (n == 0) return false;
  name.assign(line.substr(0, n));
  line.remove_prefix(n);
  size_t count = 1;
  if (!line.empty() && line[0] == '[') {
    line.remove_prefix(1);
    size_t c;
    if (digits(c) && !line.empty() && line[0] == ']') count = c;
  }
  bytes = bits / 8 * count;
  return true;
}

// `.entry name(` declarations, and module-scope `.global`/`.const` variables with their size.
void read_ptx(const char* text, size_t size, ImageInfo& out) {
  std::string_view s(text, strnlen(text, size));
  for (size_t pos = s.find(".entry"); pos != std::string::npos; pos = s.find(".entry", pos + 6)) {
    size_t b = s.find_first_not_of(" \t", pos + 6);
    size_t e = s.find_first_of(" \t(\n", b);
    if (b != std::string::npos && e != std::string::npos) out.kernels.insert(std::string(s.substr(b, e - b)));
  }
  std::string name;
  for (size_t start = 0; start < s.size();) {
    size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    size_t bytes = 0;
    if (read_ptx_variable(s.substr(start, end - start), name, bytes) && bytes) out.globals[name] = GlobalVar{bytes, {}};
    start = end + 1;
  }
}

// The simulated GPU is an sm_90: like the driver, read the entries it would load (the sm_90
// cubins, else the PTX of the newest architecture up to 9.0, which the driver would compile)
// and skip the others. Libraries ship one entry per architecture, often compressed: reading
// only these makes loading cuBLAS's, cuDNN's and NCCL's fatbins several times faster (NCCL's
// hold ~100 MB per architecture).
constexpr uint32_t kDeviceArch = 90;

// The entry headers of a fatbin, and its size (header + entries); 0 if `p` is not one.
size_t fatbin_entries(const unsigned char* p, std::vector<std::pair<FatbinEntry, size_t>>& entries) {
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  if (magic != kFatbinMagic) return 0;
  uint16_t header_size;
  uint64_t payload;
  std::memcpy(&header_size, p + 6, 2);
  std::memcpy(&payload, p + 8, 8);
  size_t total = header_size + payload;
  for (size_t off = header_size; off + sizeof(FatbinEntry) <= total;) {
    FatbinEntry e;
    std::memcpy(&e, p + off, sizeof e);
    if (e.header_size == 0 || off + e.header_size + e.padded_payload_size > total) break;
    entries.emplace_back(e, off);
    off += e.header_size + e.padded_payload_size;
  }
  return total;
}

// Reads the entries for the device.
void read_fatbin(const unsigned char* p, ImageInfo& out) {
  std::vector<std::pair<FatbinEntry, size_t>> entries;
  fatbin_entries(p, entries);
  bool has_cubin = false;
  uint32_t best_ptx = 0;
  for (const auto& [e, off] : entries) {
    if (e.kind == 2 && e.arch == kDeviceArch) has_cubin = true;
    if (e.kind == 1 && e.arch <= kDeviceArch && e.arch > best_ptx) best_ptx = e.arch;
  }
  // Nothing an sm_90 loads (cuBLAS ships sm_75-only images without kernels it launches): read
  // everything, as lazy loading would only fail at the first launch of a kernel from it.
  bool everything = !has_cubin && best_ptx == 0;
  if (everything && !entries.empty()) {
    std::string seen;
    for (const auto& [e, off] : entries) seen += (e.kind == 2 ? " sm_" : " compute_") + std::to_string(e.arch);
    log(3, "module load: the fatbin holds%s, nothing for sm_90; reading all of it", seen.c_str());
  }
  for (const auto& [e, off] : entries) {
    bool wanted = everything || (has_cubin ? e.kind == 2 && e.arch == kDeviceArch : e.kind == 1 && e.arch == best_ptx);
    if (!wanted) continue;
    const unsigned char* body = p + off + e.header_size;
    std::string inflated;
    size_t body_size = e.padded_payload_size;
    if (e.flags & (kEntryLz4 | kEntryZstd)) {
      if (!inflate(e, body, inflated)) {
        log(1, "cannot inflate a compressed fatbin entry (needs libzstd.so.1 / liblz4.so.1); "
               "build with -Xfatbin=-compress-all=false or --compress-mode=none");
        continue;
      }
      body = reinterpret_cast<const unsigned char*>(inflated.data());
      body_size = inflated.size();
    }
    if (e.kind == 2 || (body_size >= SELFMAG && std::memcmp(body, ELFMAG, SELFMAG) == 0)) read_elf(body, body_size, out);
    else read_ptx(reinterpret_cast<const char*>(body), body_size, out);
  }
}

CUresult read_image(const void* image, ImageInfo& out) {
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const unsigned char*>(image);
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  if (magic == kFatbinWrapperMagic) {  // __fatbinwrap: {magic, version, fatbin, prelinked list}
    const void* data;
    std::memcpy(&data, p + 8, sizeof data);
    return read_image(data, out);
  }
  if (magic == kLinkedImageMagic) {  // cuLinkComplete's: every input's kernels and variables
    uint32_t count;
    std::memcpy(&count, p + 4, 4);
    size_t at = 8;
    for (uint32_t i = 0; i < count; ++i) {
      uint64_t size;
      std::memcpy(&size, p + at, 8);
      // Each input was checked when it was added; a PTX input of device functions alone has
      // no name to contribute (read_image calls that invalid on its own).
      read_image(p + at + 8, out);
      at += 8 + (size + 7) / 8 * 8;
    }
    return CUDA_SUCCESS;
  }
  // A well-formed fatbin or cubin may hold no kernel and no variable: nvcc registers one for
  // every translation unit, also for programs that only allocate and copy. That is valid.
  if (magic == kFatbinMagic) {
    read_fatbin(p, out);
    return CUDA_SUCCESS;
  }
  if (std::memcmp(p, ELFMAG, SELFMAG) == 0) {
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
    read_elf(p, eh->e_shoff + static_cast<size_t>(eh->e_shnum) * sizeof(Elf64_Shdr), out);
    return CUDA_SUCCESS;
  }
  read_ptx(reinterpret_cast<const char*>(p), 1 << 26, out);
  return out.kernels.empty() && out.globals.empty() ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
}

}  // namespace simgpu
