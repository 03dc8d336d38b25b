// Modules and libraries from real nvcc images: cubin (ELF), fatbin (containers of ELF/PTX
// entries) and PTX text. Kernel names are read from the image; looking up a name the image
// does not contain fails with CUDA_ERROR_NOT_FOUND, as on a real GPU. Kernel bodies are not
// executed (see engine.cpp for the cost model).
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "module_image.h"
#include "sim.h"

namespace simgpu {

struct Module {
  uint32_t magic = 0x4d4f4455;
  ImageInfo image;
  std::mutex m;
  std::vector<std::unique_ptr<Function>> functions;
  std::map<std::string, CUdeviceptr> global_memory;  // allocated on first lookup
};

namespace {

CUresult load_image(const void* image, Module** out) {
  if (!image || !out) return CUDA_ERROR_INVALID_VALUE;
  auto m = std::make_unique<Module>();
  CUresult r = read_image(image, m->image);
  if (r != CUDA_SUCCESS) return r;
  log(3, "loaded image with %zu kernels, %zu globals", m->image.kernels.size(), m->image.globals.size());
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
  if (!m->image.kernels.count(name)) {
    log(2, "kernel lookup: '%s' is not in the module's image", name);
    return CUDA_ERROR_NOT_FOUND;
  }
  // NCCL's version is read here, on the application's thread, not where its first kernel
  // runs: an engine thread must never wait for the dynamic loader (collectives.cpp).
  if (is_nccl_name(name)) loaded_nccl_version();
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
  f->mix = f->name.find("spin_mix") != std::string::npos;
  *out = f.get();
  m->functions.push_back(std::move(f));
  return CUDA_SUCCESS;
}

// A global lives in host memory like every device allocation, initialised from the image.
CUresult get_global(Module* m, const char* name, CUdeviceptr* dptr, size_t* bytes) {
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  auto g = m->image.globals.find(name);
  if (g == m->image.globals.end()) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard<std::mutex> lock(m->m);
  CUdeviceptr& p = m->global_memory[name];
  if (!p) {
    p = allocate_untracked(g->second.size);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    std::memcpy(reinterpret_cast<void*>(p), g->second.init.data(), std::min(g->second.init.size(), g->second.size));
  }
  if (dptr) *dptr = p;
  if (bytes) *bytes = g->second.size;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult load_module_image(const void* image, CUmodule* out) {
  return load_image(image, reinterpret_cast<Module**>(out));
}

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
  SIM_FAIL_POINT();
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
  SIM_FAIL_POINT();
  if (!module) return CUDA_ERROR_INVALID_VALUE;
  return load_file(path, reinterpret_cast<Module**>(module));
}
SIM_API CUresult cuModuleUnload(CUmodule module) {
  return as_module(module) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;  // kept: handles stay valid
}
SIM_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  SIM_FAIL_POINT();
  return get_function(as_module(module), name, reinterpret_cast<Function**>(f));
}
SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule m, const char* name) {
  return get_global(as_module(m), name, dptr, bytes);
}
SIM_API CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary lib, const char* name) {
  return get_global(as_module(lib), name, dptr, bytes);
}
SIM_API CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary lib, const char* name) {
  return get_global(as_module(lib), name, dptr, bytes);
}
SIM_API CUresult cuModuleGetFunctionCount(unsigned* count, CUmodule m) {
  Module* mod = as_module(m);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(mod->image.kernels.size());
  return CUDA_SUCCESS;
}
SIM_API CUresult cuLibraryGetKernelCount(unsigned* count, CUlibrary lib) {
  return cuModuleGetFunctionCount(count, reinterpret_cast<CUmodule>(lib));
}
SIM_API CUresult cuModuleEnumerateFunctions(CUfunction* fns, unsigned n, CUmodule m) {
  Module* mod = as_module(m);
  if (!fns) return CUDA_ERROR_INVALID_VALUE;
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  unsigned i = 0;
  for (const std::string& name : mod->image.kernels) {
    if (i == n) break;
    CUresult r = get_function(mod, name.c_str(), reinterpret_cast<Function**>(&fns[i++]));
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
SIM_API CUresult cuLibraryEnumerateKernels(CUkernel* ks, unsigned n, CUlibrary lib) {
  return cuModuleEnumerateFunctions(reinterpret_cast<CUfunction*>(ks), n, reinterpret_cast<CUmodule>(lib));
}

SIM_API CUresult cuLibraryLoadData(CUlibrary* lib, const void* code, CUjit_option* jo, void** jv,
                                   unsigned jn, CUlibraryOption* lo, void** lv, unsigned ln) {
  (void)jo, (void)jv, (void)jn, (void)lo, (void)lv, (void)ln;
  SIM_FAIL_POINT();
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
  SIM_FAIL_POINT();
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
