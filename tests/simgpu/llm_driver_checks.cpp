// Checks of what LLM engines (vLLM, FlashAttention 3, CUTLASS's Hopper kernels) need from the
// simulated driver and NVML beyond what PyTorch and NCCL need, one behaviour each.
// Usage: simgpu_llm_driver CHECK
//   tensor_map     cuTensorMapEncodeTiled/Im2col and cuTensorMapReplaceAddress: a descriptor
//                  for valid arguments, CUDA_ERROR_INVALID_VALUE for those cuda.h rules out
//   nvml_topology  NUMA node and CPU/memory affinity of a GPU (vLLM's NUMA binding)
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "check.h"

static void tensor_map() {
  use_primary_context();
  CUdeviceptr buf;
  CK(cuMemAlloc(&buf, 1 << 20));
  void* base = reinterpret_cast<void*>(buf);
  alignas(128) CUtensorMap map{};
  // A bf16 matrix of 64 rows x 512 columns, boxes of 64 x 64 with 128-byte swizzle: what a
  // Hopper attention kernel loads.
  cuuint64_t dims[2] = {512, 64}, strides[1] = {512 * 2};
  cuuint32_t box[2] = {64, 64}, elem[2] = {1, 1};
  auto tiled = [&](CUtensorMap* m, void* addr, cuuint32_t rank, const cuuint32_t* b, CUtensorMapSwizzle sw) {
    return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, addr, dims, strides, b, elem,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  CK(tiled(&map, base, 2, box, CU_TENSOR_MAP_SWIZZLE_128B));
  CUtensorMap zero{};
  CHECK(std::memcmp(&map, &zero, sizeof map) != 0);  // something was written
  // Refused as cuda.h says: a misaligned address, rank 0 or 6, a box over 256, an inner box
  // wider than the swizzle span, a map not aligned to 64 bytes.
  CHECK(tiled(&map, static_cast<char*>(base) + 8, 2, box, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_ERROR_INVALID_VALUE);
  CHECK(tiled(&map, base, 0, box, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_ERROR_INVALID_VALUE);
  CHECK(tiled(&map, base, 6, box, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_ERROR_INVALID_VALUE);
  cuuint32_t big_box[2] = {512, 64};
  CHECK(tiled(&map, base, 2, big_box, CU_TENSOR_MAP_SWIZZLE_NONE) == CUDA_ERROR_INVALID_VALUE);
  CHECK(tiled(&map, base, 2, box, CU_TENSOR_MAP_SWIZZLE_64B) == CUDA_ERROR_INVALID_VALUE);  // 128 bytes > 64
  alignas(128) unsigned char raw[sizeof(CUtensorMap) + 64];
  CHECK(tiled(reinterpret_cast<CUtensorMap*>(raw + 32), base, 2, box, CU_TENSOR_MAP_SWIZZLE_128B) ==
        CUDA_ERROR_INVALID_VALUE);
  // A stride that is not a multiple of 16 bytes.
  strides[0] = 1000;
  CHECK(tiled(&map, base, 2, box, CU_TENSOR_MAP_SWIZZLE_128B) == CUDA_ERROR_INVALID_VALUE);
  strides[0] = 1024;
  // Moving a descriptor to another buffer (FlashAttention does it per launch).
  CK(tiled(&map, base, 2, box, CU_TENSOR_MAP_SWIZZLE_128B));
  CK(cuTensorMapReplaceAddress(&map, static_cast<char*>(base) + 4096));
  CHECK(cuTensorMapReplaceAddress(&map, static_cast<char*>(base) + 4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuTensorMapReplaceAddress(&zero, base) == CUDA_ERROR_INVALID_VALUE);  // not made by an encoder
  // Im2col of an NHWC fp16 tensor (rank 4): 8 channels, 32 pixels per column.
  cuuint64_t nhwc[4] = {64, 16, 16, 2}, nhwc_strides[3] = {64 * 2, 64 * 2 * 16, 64 * 2 * 16 * 16};
  cuuint32_t elem4[4] = {1, 1, 1, 1};
  int lower[2] = {-1, -1}, upper[2] = {1, 1}, far[2] = {-200, 0};
  auto im2col = [&](const int* lo, cuuint32_t channels) {
    return cuTensorMapEncodeIm2col(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, base, nhwc, nhwc_strides, lo, upper,
                                   channels, 32, elem4, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  CK(im2col(lower, 8));
  CHECK(im2col(far, 8) == CUDA_ERROR_INVALID_VALUE);    // a corner beyond [-128, 128) for rank 4
  CHECK(im2col(lower, 300) == CUDA_ERROR_INVALID_VALUE);  // more than 256 channels
  CK(cuMemFree(buf));
}

static void nvml_topology() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  CHECK(lib);
  auto sym = [&](const char* name) {
    void* p = dlsym(lib, name);
    if (!p) std::fprintf(stderr, "FAIL: NVML has no %s\n", name);
    CHECK(p);
    return p;
  };
  auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
  auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto numa = reinterpret_cast<int (*)(void*, unsigned*)>(sym("nvmlDeviceGetNumaNodeId"));
  auto cpus = reinterpret_cast<int (*)(void*, unsigned, unsigned long*)>(sym("nvmlDeviceGetCpuAffinity"));
  auto cpus_scope =
      reinterpret_cast<int (*)(void*, unsigned, unsigned long*, unsigned)>(sym("nvmlDeviceGetCpuAffinityWithinScope"));
  auto nodes = reinterpret_cast<int (*)(void*, unsigned, unsigned long*, unsigned)>(sym("nvmlDeviceGetMemoryAffinity"));
  CHECK(init() == 0);
  void* dev;
  CHECK(by_index(0, &dev) == 0);
  unsigned node = 7;
  CHECK(numa(dev, &node) == 0 && node == 0);
  CHECK(numa(nullptr, &node) == 2);  // NVML_ERROR_INVALID_ARGUMENT
  unsigned long set[4] = {};
  CHECK(cpus(dev, 4, set) == 0);
  long n = sysconf(_SC_NPROCESSORS_CONF);
  int bits = 0;
  for (unsigned long w : set) bits += __builtin_popcountl(w);
  CHECK(bits == (n < 256 ? n : 256) && (set[0] & 1));  // every CPU of the machine, CPU 0 first
  unsigned long scoped[4] = {};
  CHECK(cpus_scope(dev, 4, scoped, 0) == 0 && std::memcmp(set, scoped, sizeof set) == 0);
  CHECK(cpus_scope(dev, 4, scoped, 2) == 2);  // no such scope
  CHECK(cpus(dev, 0, set) == 2);
  unsigned long node_set[1] = {};
  CHECK(nodes(dev, 1, node_set, 0) == 0 && node_set[0] == 1);
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  std::string check = argv[1];
  if (check == "tensor_map") tensor_map();
  else if (check == "nvml_topology") nvml_topology();
  else CHECK(!"unknown check");
  std::printf("simgpu %s: ok\n", check.c_str());
  return 0;
}
