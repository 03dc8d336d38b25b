// Checks shared by the test programs (simulated driver, interposition fixtures): a failed
// check prints where and exits 1.
#pragma once
#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

#define CK(call)                                                                            \
  do {                                                                                      \
    CUresult r_ = (call);                                                                   \
    if (r_ != CUDA_SUCCESS) {                                                               \
      std::fprintf(stderr, "FAIL %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, r_);  \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

// Initialises the driver and makes device 0's primary context current.
inline void use_primary_context() {
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(cuCtxSetCurrent(ctx));
}

inline CUfunction load_kernel(const char* image_path, const char* name, CUmodule* module_out = nullptr) {
  CUmodule mod;
  CUfunction f;
  use_primary_context();
  CK(cuModuleLoad(&mod, image_path));
  CK(cuModuleGetFunction(&f, mod, name));
  if (module_out) *module_out = mod;
  return f;
}
