// Memory hooks: count allocations and frees of every path (plain, pitch, async, pool,
// managed, VMM by handle) and track bytes in use and the peak. Quotas and the pool build on
// these hooks (DESIGN §6).
#include <mutex>
#include <new>
#include <unordered_map>

#include "counters.h"
#include "hooks.h"
#include "log.h"
#include "real_driver.h"

namespace tandem::hook {

namespace {

// Sizes of live allocations, keyed by device pointer or VMM handle. Allocated once and never
// destroyed: frees may arrive during static destruction.
struct LiveAllocations {
  std::mutex mutex;
  std::unordered_map<uint64_t, uint64_t> pointers;  // device pointer -> bytes
  std::unordered_map<uint64_t, uint64_t> handles;   // VMM physical handle -> bytes
};

using Table = std::unordered_map<uint64_t, uint64_t> LiveAllocations::*;

LiveAllocations& live() noexcept {
  static LiveAllocations* instance = new LiveAllocations();
  return *instance;
}

void on_alloc(Table table, uint64_t key, uint64_t bytes) noexcept {
  MemoryCounters& m = memory_counters();
  count(m.allocs);
  try {
    std::lock_guard<std::mutex> lock(live().mutex);
    (live().*table)[key] = bytes;
  } catch (...) {
    TANDEM_LOG_WARN("cannot track allocation of {} bytes", bytes);
    return;
  }
  uint64_t now = m.bytes_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = m.peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !m.peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void on_free(Table table, uint64_t key) noexcept {
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(live().mutex);
    auto& sizes = live().*table;
    auto it = sizes.find(key);
    if (it == sizes.end()) return;  // not ours (allocated before tandem, or invalid)
    bytes = it->second;
    sizes.erase(it);
  }
  MemoryCounters& m = memory_counters();
  count(m.frees);
  m.bytes_in_use.fetch_sub(bytes, std::memory_order_relaxed);
}

CUresult allocated(CUresult r, CUdeviceptr* dptr, uint64_t bytes) noexcept {
  if (r == CUDA_SUCCESS && dptr) on_alloc(&LiveAllocations::pointers, *dptr, bytes);
  return r;
}

CUresult freed(CUresult r, CUdeviceptr dptr) noexcept {
  if (r == CUDA_SUCCESS && dptr) on_free(&LiveAllocations::pointers, dptr);
  return r;
}

}  // namespace

void memory_tracker_reset_in_child() noexcept {
  // The parent's allocations are not the child's: forget them (the mutex may be held by a
  // thread that does not exist here, so the tracker is replaced, and the old one leaked).
  new (&live()) LiveAllocations();
}

CUresult hook_cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) noexcept {
  return allocated(g_real.cuMemAlloc_v2(dptr, size), dptr, size);
}

CUresult hook_cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                 unsigned int elem) noexcept {
  CUresult r = g_real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
  return allocated(r, dptr, pitch ? static_cast<uint64_t>(*pitch) * height : width * height);
}

CUresult hook_cuMemFree_v2(CUdeviceptr dptr) noexcept {
  return freed(g_real.cuMemFree_v2(dptr), dptr);
}

CUresult hook_cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) noexcept {
  return allocated(g_real.cuMemAllocAsync(dptr, size, s), dptr, size);
}

CUresult hook_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream s) noexcept {
  return allocated(g_real.cuMemAllocAsync_ptsz(dptr, size, s), dptr, size);
}

CUresult hook_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                      CUstream s) noexcept {
  return allocated(g_real.cuMemAllocFromPoolAsync(dptr, size, pool, s), dptr, size);
}

CUresult hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                           CUstream s) noexcept {
  return allocated(g_real.cuMemAllocFromPoolAsync_ptsz(dptr, size, pool, s), dptr, size);
}

CUresult hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream s) noexcept {
  return freed(g_real.cuMemFreeAsync(dptr, s), dptr);
}

CUresult hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) noexcept {
  return freed(g_real.cuMemFreeAsync_ptsz(dptr, s), dptr);
}

CUresult hook_cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned int flags) noexcept {
  return allocated(g_real.cuMemAllocManaged(dptr, size, flags), dptr, size);
}

// VMM is counted by physical handle, never at reserve or map. NCCL calls cuMemCreate from
// threads without a current context and with host locations: nothing here needs a context.
CUresult hook_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                          const CUmemAllocationProp* prop, unsigned long long flags) noexcept {
  CUresult r = g_real.cuMemCreate(handle, size, prop, flags);
  if (r == CUDA_SUCCESS && handle) on_alloc(&LiveAllocations::handles, *handle, size);
  return r;
}

CUresult hook_cuMemRelease(CUmemGenericAllocationHandle handle) noexcept {
  CUresult r = g_real.cuMemRelease(handle);
  if (r == CUDA_SUCCESS) on_free(&LiveAllocations::handles, handle);
  return r;
}

}  // namespace tandem::hook
