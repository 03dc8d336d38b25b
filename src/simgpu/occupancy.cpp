// Function attributes and occupancy queries, answered as an H100 would for a kernel that uses
// no static shared memory and 32 registers per thread: libraries size their launches from these
// (cuBLAS asks how much dynamic shared memory a block may have, cuDNN and PyTorch how many
// blocks fit an SM), and raise a kernel's dynamic shared memory limit before launching it.
// Limits: 2048 threads, 32 blocks, 64 Ki registers and 228 KiB shared memory per SM (1 KiB of
// it reserved per block), 227 KiB per block with the opt-in, clusters of up to 8 (16 opt-in).
#include <algorithm>

#include "sim.h"

namespace simgpu {

namespace {

constexpr int kThreadsPerSm = 2048, kBlocksPerSm = 32, kRegsPerSm = 65536, kRegsPerThread = 32;
constexpr size_t kSmemPerSm = 228 << 10, kSmemReservedPerBlock = 1 << 10, kSmemOptin = 227 << 10;
constexpr int kMaxCluster = 8, kMaxClusterNonPortable = 16;

// Blocks of `block` threads using `smem` bytes of dynamic shared memory that fit one SM.
int blocks_per_sm(int block, size_t smem) {
  if (block <= 0 || block > 1024 || smem > kSmemOptin) return 0;
  int by_threads = kThreadsPerSm / block;
  int by_regs = kRegsPerSm / (kRegsPerThread * ((block + 31) / 32 * 32));
  int by_smem = static_cast<int>(kSmemPerSm / (smem + kSmemReservedPerBlock));
  return std::max(0, std::min({kBlocksPerSm, by_threads, by_regs, by_smem}));
}

CUresult check_function(const void* f) { return as_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }

}  // namespace

}  // namespace simgpu

using namespace simgpu;

SIM_API CUresult cuFuncGetAttribute(int* v, CUfunction_attribute attr, CUfunction f) {
  Function* fn = as_function(f);
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = kRegsPerThread; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = fn->max_dynamic_smem.load(); break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *v = fn->carveout.load(); break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *v = fn->non_portable_cluster.load(); break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *v = fn->cluster_policy.load(); break;
    default:
      log(2, "cuFuncGetAttribute: attribute %d is not one the simulated GPU knows", static_cast<int>(attr));
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int v) {
  Function* fn = as_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (v < 0 || static_cast<size_t>(v) > kSmemOptin) return CUDA_ERROR_INVALID_VALUE;
      fn->max_dynamic_smem = v;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (v < -1 || v > 100) return CUDA_ERROR_INVALID_VALUE;
      fn->carveout = v;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      fn->non_portable_cluster = v ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      fn->cluster_policy = v;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      return v >= 0 && v <= kMaxClusterNonPortable ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      log(2, "cuFuncSetAttribute: attribute %d cannot be set on the simulated GPU", static_cast<int>(attr));
      return CUDA_ERROR_INVALID_VALUE;  // read-only attributes, as on the real driver
  }
}

SIM_API CUresult cuKernelGetAttribute(int* v, CUfunction_attribute attr, CUkernel k, CUdevice d) {
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  return cuFuncGetAttribute(v, attr, reinterpret_cast<CUfunction>(k));
}
SIM_API CUresult cuKernelSetAttribute(CUfunction_attribute attr, int v, CUkernel k, CUdevice d) {
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(k), attr, v);
}
SIM_API CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache, CUdevice d) {
  if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  return check_function(k);
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, CUfunction f, int block, size_t smem,
                                                                      unsigned) {
  if (!n || block <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_function(f); r != CUDA_SUCCESS) return r;
  *n = blocks_per_sm(block, smem);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction f, int block, size_t smem) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, smem, 0);
}

// The block size (a multiple of 32, up to the limit) with the most resident threads per SM.
SIM_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid, int* block, CUfunction f,
                                                           CUoccupancyB2DSize smem_of_block, size_t smem, int limit,
                                                           unsigned) {
  if (!min_grid || !block) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_function(f); r != CUDA_SUCCESS) return r;
  int cap = limit > 0 && limit < 1024 ? limit : 1024;
  int best_block = 0, best_threads = 0, best_blocks = 0;
  for (int b = cap / 32 * 32; b >= 32; b -= 32) {
    size_t s = smem_of_block ? smem_of_block(b) : smem;
    int blocks = blocks_per_sm(b, s);
    if (blocks * b > best_threads) best_block = b, best_threads = blocks * b, best_blocks = blocks;
  }
  *block = best_block;
  *min_grid = best_blocks * settings().sms;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuOccupancyMaxPotentialBlockSize(int* min_grid, int* block, CUfunction f, CUoccupancyB2DSize cb,
                                                  size_t smem, int limit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block, f, cb, smem, limit, 0);
}

SIM_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction f, int blocks, int block) {
  if (!bytes || blocks <= 0 || block <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_function(f); r != CUDA_SUCCESS) return r;
  if (blocks_per_sm(block, 0) < blocks) {
    *bytes = 0;
    return CUDA_SUCCESS;
  }
  *bytes = std::min(kSmemOptin, kSmemPerSm / static_cast<size_t>(blocks) - kSmemReservedPerBlock);
  return CUDA_SUCCESS;
}

// Clusters: the largest portable size (8, or 16 when the kernel allows non-portable sizes), and
// how many clusters of the configured shape fit the GPU at once.
static unsigned cluster_blocks(const CUlaunchConfig* config) {
  for (unsigned i = 0; config && i < config->numAttrs; ++i)
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& d = config->attrs[i].value.clusterDim;
      return d.x * d.y * d.z;
    }
  return 1;
}
SIM_API CUresult cuOccupancyMaxPotentialClusterSize(int* size, CUfunction f, const CUlaunchConfig* config) {
  Function* fn = as_function(f);
  if (!size || !config) return CUDA_ERROR_INVALID_VALUE;
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  *size = fn->non_portable_cluster.load() ? kMaxClusterNonPortable : kMaxCluster;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction f, const CUlaunchConfig* config) {
  if (!clusters || !config) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_function(f); r != CUDA_SUCCESS) return r;
  unsigned per_cluster = cluster_blocks(config);
  int per_sm = blocks_per_sm(static_cast<int>(config->blockDimX * config->blockDimY * config->blockDimZ),
                             config->sharedMemBytes);
  *clusters = per_cluster == 0 ? 0 : static_cast<int>(static_cast<unsigned>(per_sm * settings().sms) / per_cluster);
  return CUDA_SUCCESS;
}
