// The few NVML types the hooks need. No NVIDIA header is used (nvml.h is not part of the CUDA
// toolkit): these follow NVML's API reference (nvml.h of the NVIDIA GPU Deployment Kit), the
// same layouts as nvidia-ml-py's ctypes structures.
#pragma once

extern "C" {

using nvmlReturn_t = int;  // an enum in nvml.h: int-sized
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;

struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {
  unsigned int version;  // nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2) = 0x02000028
  unsigned long long total, reserved, free, used;
};
static_assert(sizeof(nvmlMemory_v2_t) == 0x28);
}
