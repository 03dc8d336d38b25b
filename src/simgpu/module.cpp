// Modules and libraries from real nvcc images: cubin (ELF), fatbin (containers of ELF/PTX
// entries) and PTX text. Kernel names are read from the image; looking up a name the image
// does not contain fails with CUDA_ERROR_NOT_FOUND, as on a real GPU. Kernel bodies are not
// executed (see engine.cpp for the cost model).
#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "sim.h"

namespace simgpu {

struct Module {
  uint32_t magic = 0x4d4f4455;
  std::set<std::string> names;
  std::mutex m;
  std::vector<std::unique_ptr<Function>> functions;
};

namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint32_t kFatbinWrapperMagic = 0x466243b1;

// Function symbols of one ELF (cubin) image.
void names_from_elf(const unsigned char* p, size_t size, std::set<std::string>& out) {
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(p, ELFMAG, SELFMAG) != 0 || p[EI_CLASS] != ELFCLASS64)
    return;
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
      if (ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC || syms[k].st_name >= strtab.sh_size) continue;
      const char* name = reinterpret_cast<const char*>(p + strtab.sh_offset + syms[k].st_name);
      size_t max = strtab.sh_size - syms[k].st_name;
      out.insert(std::string(name, strnlen(name, max)));
    }
  }
}

// `.entry name(` declarations of a PTX text.
void names_from_ptx(const char* text, size_t size, std::set<std::string>& out) {
  std::string s(text, strnlen(text, size));
  for (size_t pos = s.find(".entry"); pos != std::string::npos; pos = s.find(".entry", pos + 6)) {
    size_t b = s.find_first_not_of(" \t", pos + 6);
    size_t e = s.find_first_of(" \t(\n", b);
    if (b != std::string::npos && e != std::string::npos) out.insert(s.substr(b, e - b));
  }
}

// A fatbin: header {magic, version(16), header size(16), payload size(64)} then entries
// {kind(16), version(16), header size(32), payload size(64), ...}. Entries may be compressed;
// we find the ELF and PTX payloads by their own headers, which covers nvcc's default output.
size_t names_from_fatbin(const unsigned char* p, std::set<std::string>& out) {
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  if (magic != kFatbinMagic) return 0;
  uint16_t header_size;
  uint64_t payload;
  std::memcpy(&header_size, p + 6, 2);
  std::memcpy(&payload, p + 8, 8);
  size_t total = header_size + payload;
  for (size_t off = header_size; off + 16 <= total;) {
    uint16_t kind;
    uint32_t entry_header;
    uint64_t entry_size;
    std::memcpy(&kind, p + off, 2);
    std::memcpy(&entry_header, p + off + 4, 4);
    std::memcpy(&entry_size, p + off + 8, 8);
    if (entry_header == 0 || off + entry_header + entry_size > total) break;
    const unsigned char* body = p + off + entry_header;
    if (std::memcmp(body, ELFMAG, SELFMAG) == 0) names_from_elf(body, entry_size, out);
    else if (kind == 1) names_from_ptx(reinterpret_cast<const char*>(body), entry_size, out);
    else log(1, "fatbin entry of kind %u is compressed or unknown; its kernels are not visible", kind);
    off += entry_header + entry_size;
  }
  return total;
}

CUresult load_image(const void* image, Module** out) {
  if (!image) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const unsigned char*>(image);
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  auto m = std::make_unique<Module>();
  if (magic == kFatbinWrapperMagic) {  // __cudaRegisterFatBinary's wrapper {magic, version, data}
    const void* data;
    std::memcpy(&data, p + 8, sizeof data);
    return load_image(data, out);
  }
  if (magic == kFatbinMagic) names_from_fatbin(p, m->names);
  else if (std::memcmp(p, ELFMAG, SELFMAG) == 0) {
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
    names_from_elf(p, eh->e_shoff + static_cast<size_t>(eh->e_shnum) * sizeof(Elf64_Shdr), m->names);
  } else names_from_ptx(reinterpret_cast<const char*>(p), 1 << 24, m->names);
  if (m->names.empty()) return CUDA_ERROR_INVALID_IMAGE;
  log(3, "loaded image with %zu kernels", m->names.size());
  *out = m.release();
  return CUDA_SUCCESS;
}

CUresult load_file(const char* path, Module** out) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  auto* bytes = new std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bytes->push_back('\0');
  return load_image(bytes->data(), out);  // image kept alive with the module (never unloaded)
}

Module* as_module(const void* h) {
  auto* m = static_cast<Module*>(const_cast<void*>(h));
  return m && m->magic == 0x4d4f4455 ? m : nullptr;
}

CUresult get_function(Module* m, const char* name, Function** out) {
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (!name || !out) return CUDA_ERROR_INVALID_VALUE;
  if (!m->names.count(name)) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard<std::mutex> lock(m->m);
  for (auto& f : m->functions)
    if (f->name == name) {
      *out = f.get();
      return CUDA_SUCCESS;
    }
  auto f = std::make_unique<Function>();
  f->module = m;
  f->name = name;
  f->nccl = is_nccl_name(f->name);
  f->spin = f->name.find("spin") != std::string::npos;
  *out = f.get();
  m->functions.push_back(std::move(f));
  return CUDA_SUCCESS;
}

}  // namespace

bool is_nccl_name(const std::string& n) {
  return n.find("ncclDevKernel_") != std::string::npos || n.find("ncclKernel") != std::string::npos ||
         n.find("ncclSymkDevKernel_") != std::string::npos;
}

Function* as_function(const void* handle) {
  auto* f = static_cast<Function*>(const_cast<void*>(handle));
  return f && f->magic == 0x46554e43 ? f : nullptr;
}

}  // namespace simgpu

using namespace simgpu;

SIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  SIM_FAIL_POINT("cuModuleLoadData", CUDA_ERROR_INVALID_IMAGE);
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  return load_image(image, reinterpret_cast<Module**>(module));
}
SIM_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned n, CUjit_option* o, void** v) {
  (void)n, (void)o, (void)v;
  return cuModuleLoadData(module, image);
}
SIM_API CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  return cuModuleLoadData(module, image);
}
SIM_API CUresult cuModuleLoad(CUmodule* module, const char* path) {
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  return load_file(path, reinterpret_cast<Module**>(module));
}
SIM_API CUresult cuModuleUnload(CUmodule module) {
  return as_module(module) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;  // kept: handles stay valid
}
SIM_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  return get_function(as_module(module), name, reinterpret_cast<Function**>(f));
}
SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule m, const char* name) {
  (void)dptr, (void)bytes, (void)m, (void)name;
  return CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuLibraryLoadData(CUlibrary* lib, const void* code, CUjit_option* jo, void** jv,
                                   unsigned jn, CUlibraryOption* lo, void** lv, unsigned ln) {
  (void)jo, (void)jv, (void)jn, (void)lo, (void)lv, (void)ln;
  SIM_FAIL_POINT("cuLibraryLoadData", CUDA_ERROR_INVALID_IMAGE);
  if (!lib) return CUDA_ERROR_INVALID_VALUE;
  return load_image(code, reinterpret_cast<Module**>(lib));
}
SIM_API CUresult cuLibraryLoadFromFile(CUlibrary* lib, const char* path, CUjit_option* jo, void** jv,
                                       unsigned jn, CUlibraryOption* lo, void** lv, unsigned ln) {
  (void)jo, (void)jv, (void)jn, (void)lo, (void)lv, (void)ln;
  if (!lib) return CUDA_ERROR_INVALID_VALUE;
  return load_file(path, reinterpret_cast<Module**>(lib));
}
SIM_API CUresult cuLibraryUnload(CUlibrary lib) {
  return as_module(lib) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuLibraryGetKernel(CUkernel* k, CUlibrary lib, const char* name) {
  return get_function(as_module(lib), name, reinterpret_cast<Function**>(k));
}
SIM_API CUresult cuLibraryGetModule(CUmodule* m, CUlibrary lib) {
  if (!m || !as_module(lib)) return CUDA_ERROR_INVALID_VALUE;
  *m = reinterpret_cast<CUmodule>(lib);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuKernelGetFunction(CUfunction* f, CUkernel k) {
  if (!f || !as_function(k)) return CUDA_ERROR_INVALID_HANDLE;
  *f = reinterpret_cast<CUfunction>(k);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuFuncGetName(const char** name, CUfunction f) {
  Function* fn = as_function(f);
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
}
SIM_API CUresult cuKernelGetName(const char** name, CUkernel k) {
  return cuFuncGetName(name, reinterpret_cast<CUfunction>(k));
}
SIM_API CUresult cuFuncGetAttribute(int* v, CUfunction_attribute attr, CUfunction f) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (!as_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  *v = attr == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int v) {
  (void)attr, (void)v;
  return as_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuKernelGetAttribute(int* v, CUfunction_attribute attr, CUkernel k, CUdevice d) {
  (void)d;
  return cuFuncGetAttribute(v, attr, reinterpret_cast<CUfunction>(k));
}
SIM_API CUresult cuKernelSetAttribute(CUfunction_attribute attr, int v, CUkernel k, CUdevice d) {
  (void)d;
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(k), attr, v);
}
