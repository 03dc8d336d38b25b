// The device's memory pool while tandem's pool serves the stream-ordered allocations made from
// it (TANDEM_MEM_POOL=1, memory_hooks.cpp). cuMemAllocAsync allocates from the device's current
// memory pool (cuDeviceGetMemPool): with tandem's pool on, those blocks are tandem's, and the
// driver's pool would report neither them nor the chunks that hold them. PyTorch's stream-ordered
// allocator (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) takes its figures from that pool
// (torch.cuda.memory_allocated, memory_reserved and their peaks) and empties its cache by
// trimming it (torch.cuda.empty_cache: cuMemPoolTrimTo). So for that pool:
//   used = the driver's + tandem's live blocks, reserved = the driver's + tandem's held chunks,
//   and their high-water marks (reset by setting them to 0, as the driver documents);
//   trimming gives tandem's idle chunks back too (to tandemd, which can hand them on).
#include "hooks.h"
#include "log.h"
#include "pool_backend.h"
#include "real_driver.h"

namespace tandem::hook {

namespace {

// True when `pool` is the one cuMemAllocAsync of the pool's device allocates from.
bool serves_pool(CUmemoryPool pool) noexcept {
  CUdevice dev = 0;
  CUmemoryPool current = nullptr;
  return pool && pool_device(&dev) && g_real.cuDeviceGetMemPool(&current, dev) == CUDA_SUCCESS && current == pool;
}

}  // namespace

CUresult hook_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) noexcept {
  CUresult r = g_real.cuMemPoolGetAttribute(pool, attr, value);
  if (r != CUDA_SUCCESS || !value || !serves_pool(pool)) return r;
  PoolLevels l = pool_levels();
  auto* bytes = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *bytes += l.held; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *bytes += l.held_peak; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *bytes += l.live; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *bytes += l.live_peak; break;
    default: break;
  }
  return r;
}

CUresult hook_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) noexcept {
  CUresult r = g_real.cuMemPoolSetAttribute(pool, attr, value);
  if (r != CUDA_SUCCESS || !serves_pool(pool)) return r;
  if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) pool_reset_peaks(true, false);
  if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) pool_reset_peaks(false, true);
  return r;
}

// The pool keeps `keep` bytes reserved in all: the driver's part first, tandem's idle chunks
// beyond the rest go back.
CUresult hook_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) noexcept {
  CUresult r = g_real.cuMemPoolTrimTo(pool, keep);
  if (r != CUDA_SUCCESS || !serves_pool(pool)) return r;
  cuuint64_t driver_reserved = 0;
  g_real.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &driver_reserved);
  uint64_t released = pool_trim_to(keep > driver_reserved ? keep - driver_reserved : 0);
  if (released) TANDEM_LOG_DEBUG("memory pool: trimmed by the application, {} MiB given back", released >> 20);
  return r;
}

}  // namespace tandem::hook
