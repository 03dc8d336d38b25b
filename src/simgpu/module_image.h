// What the simulated driver reads from an nvcc image (module_image.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
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

// The image cuLinkComplete produces (link.cpp): the simulator's own container of the linked
// inputs, "SGLK", a 32-bit count, then each input as a 64-bit size and its bytes (PTX with its
// NUL), padded to 8 bytes. Kernels do not run, so linking is keeping every input's names.
constexpr uint32_t kLinkedImageMagic = 0x4b4c4753;  // "SGLK" read as little-endian

// Reads a cubin, fatbin (or its __fatbinwrap wrapper), a linked image or NUL-terminated PTX text.
// CUDA_ERROR_INVALID_IMAGE when nothing is recognised.
CUresult read_image(const void* image, ImageInfo& out);

}  // namespace simgpu
