// The JIT linker (cuLinkCreate / cuLinkAddData / cuLinkAddFile / cuLinkComplete /
// cuLinkDestroy). On a GPU it compiles PTX and links relocatable device code into one cubin.
// Kernels do not run here, so what a linked image must give cuModuleLoadData is the names of
// its kernels and variables: cuLinkComplete writes the simulator's own container of the
// inputs (module_image.h, kLinkedImageMagic), which module_image.cpp reads part by part.
// Checked as a linker would: PTX must be PTX (CUDA_ERROR_INVALID_PTX otherwise), a cubin an
// ELF, a fatbin a fatbin (CUDA_ERROR_INVALID_IMAGE otherwise), a missing file
// CUDA_ERROR_FILE_NOT_FOUND, completing with no input CUDA_ERROR_INVALID_VALUE. Not
// supported: host objects, archives and NVVM/LTO IR (CU_JIT_INPUT_OBJECT, _LIBRARY, _NVVM).
// Log-buffer options are answered with empty logs.
#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "module_image.h"
#include "sim.h"

using namespace simgpu;

namespace {

struct LinkState {
  uint32_t magic = 0x4c494e4b;  // "LINK"
  std::vector<std::string> inputs;
  std::string image;  // cuLinkComplete's output, valid until cuLinkDestroy
};

LinkState* as_link(CUlinkState s) {
  auto* l = reinterpret_cast<LinkState*>(s);
  return l && l->magic == 0x4c494e4b ? l : nullptr;
}

// Empty logs and no time spent, for the options that return something.
void answer_options(unsigned n, const CUjit_option* options, void** values) {
  if (!options || !values) return;
  for (unsigned i = 0; i < n; ++i) {
    if ((options[i] == CU_JIT_INFO_LOG_BUFFER || options[i] == CU_JIT_ERROR_LOG_BUFFER) && values[i])
      *static_cast<char*>(values[i]) = '\0';
    if (options[i] == CU_JIT_WALL_TIME) {
      float zero = 0;
      std::memcpy(&values[i], &zero, sizeof zero);  // the value is stored in the pointer slot
    }
  }
}

CUresult add(LinkState* l, CUjitInputType type, const unsigned char* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, data, 4);
  switch (type) {
    case CU_JIT_INPUT_PTX:
      // Sizes may or may not count the NUL; the stored text ends with exactly one.
      while (!bytes.empty() && bytes.back() == '\0') bytes.pop_back();
      if (bytes.find(".version") == std::string::npos) return CUDA_ERROR_INVALID_PTX;
      bytes.push_back('\0');
      break;
    case CU_JIT_INPUT_CUBIN:
      if (size < SELFMAG || std::memcmp(data, ELFMAG, SELFMAG) != 0) return CUDA_ERROR_INVALID_IMAGE;
      break;
    case CU_JIT_INPUT_FATBINARY:
      if (magic != 0xBA55ED50 && magic != 0x466243b1) return CUDA_ERROR_INVALID_IMAGE;
      if (magic == 0x466243b1) return CUDA_ERROR_NOT_SUPPORTED;  // a wrapper points into its program
      break;
    case CU_JIT_INPUT_OBJECT:
    case CU_JIT_INPUT_LIBRARY:
    case CU_JIT_INPUT_NVVM: return CUDA_ERROR_NOT_SUPPORTED;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  l->inputs.push_back(std::move(bytes));
  return CUDA_SUCCESS;
}

}  // namespace

SIM_API CUresult cuLinkCreate_v2(unsigned n, CUjit_option* options, void** values, CUlinkState* out) {
  if (!out || (n && (!options || !values))) return CUDA_ERROR_INVALID_VALUE;
  answer_options(n, options, values);
  *out = reinterpret_cast<CUlinkState>(new LinkState());
  return CUDA_SUCCESS;
}
SIM_API CUresult cuLinkCreate(unsigned n, CUjit_option* options, void** values, CUlinkState* out) {
  return cuLinkCreate_v2(n, options, values, out);
}

SIM_API CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                  unsigned n, CUjit_option* options, void** values) {
  (void)name;
  LinkState* l = as_link(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  if (!data || size == 0) return CUDA_ERROR_INVALID_VALUE;
  answer_options(n, options, values);
  return add(l, type, static_cast<const unsigned char*>(data), size);
}
SIM_API CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                               unsigned n, CUjit_option* options, void** values) {
  return cuLinkAddData_v2(state, type, data, size, name, n, options, values);
}

SIM_API CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path, unsigned n,
                                  CUjit_option* options, void** values) {
  LinkState* l = as_link(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return CUDA_ERROR_INVALID_VALUE;
  answer_options(n, options, values);
  return add(l, type, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}
SIM_API CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char* path, unsigned n,
                               CUjit_option* options, void** values) {
  return cuLinkAddFile_v2(state, type, path, n, options, values);
}

SIM_API CUresult cuLinkComplete(CUlinkState state, void** image, size_t* size) {
  LinkState* l = as_link(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  if (!image || !size || l->inputs.empty()) return CUDA_ERROR_INVALID_VALUE;
  std::string out(8, '\0');
  uint32_t count = static_cast<uint32_t>(l->inputs.size());
  std::memcpy(out.data(), &kLinkedImageMagic, 4);
  std::memcpy(out.data() + 4, &count, 4);
  for (const std::string& in : l->inputs) {
    uint64_t bytes = in.size();
    out.append(reinterpret_cast<const char*>(&bytes), 8);
    out.append(in);
    out.append((8 - in.size() % 8) % 8, '\0');
  }
  l->image = std::move(out);
  *image = l->image.data();
  *size = l->image.size();
  return CUDA_SUCCESS;
}

SIM_API CUresult cuLinkDestroy(CUlinkState state) {
  LinkState* l = as_link(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  l->magic = 0;
  delete l;
  return CUDA_SUCCESS;
}
