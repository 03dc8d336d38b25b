// What the simulated driver reads from an nvcc image (module_image.cpp).
#pragma once
#include <cstddef>
#include <map>
#include <set>
#include <string>

#include "cuda_abi.h"

namespace simgpu {

struct GlobalVar {
  size_t size = 0;
  std::string init;  // initial bytes; empty: zero-initialised
};

struct ImageInfo {
  std::set<std::string> kernels;             // entry names (mangled as in the image)
  std::map<std::string, GlobalVar> globals;  // __device__ / __constant__ variables
};

// Reads a cubin, fatbin (or its __fatbinwrap wrapper) or NUL-terminated PTX text.
// CUDA_ERROR_INVALID_IMAGE when nothing is recognised.
CUresult read_image(const void* image, ImageInfo& out);

}  // namespace simgpu
