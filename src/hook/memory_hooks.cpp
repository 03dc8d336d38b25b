// Memory hooks: count allocations and frees of every path (plain, pitch, async, pool,
// managed, VMM by handle), track bytes in use and the peak, and enforce the quota
// (memory_quota.h): an allocation is charged before it reaches the driver and refused with
// CUDA_ERROR_OUT_OF_MEMORY when it would exceed the quota. The pool builds on these hooks
// (DESIGN §6). With TANDEM_MEM_POOL=1, plain and stream-ordered allocations come from the
// shared pool (pool_backend.h) instead of the driver.
#include <mutex>
#include <new>
#include <unordered_map>

#include "counters.h"
#include "green_streams.h"
#include "hooks.h"
#include "log.h"
#include "memory_quota.h"
#include "pool_backend.h"
#include "real_driver.h"
#include "zico_gate.h"

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

// Records an allocation whose bytes are already charged.
void on_alloc(Table table, uint64_t key, uint64_t bytes) noexcept {
  try {
    std::lock_guard<std::mutex> lock(live().mutex);
    (live().*table)[key] = bytes;
  } catch (...) {
    TANDEM_LOG_WARN("cannot track allocation of {} bytes", bytes);
    uncharge_memory(bytes);  // its free will not be found either
    return;
  }
  count(memory_counters().allocs);
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
  count(memory_counters().frees);
  uncharge_memory(bytes);
}

// Charges `bytes`, runs the driver's allocation, and records or refunds by its result.
template <typename Allocate>
CUresult allocate(Table table, uint64_t bytes, Allocate&& call, uint64_t* key) noexcept {
  if (!charge_memory(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  if (r == CUDA_SUCCESS && key) {
    on_alloc(table, *key, bytes);
  } else {
    uncharge_memory(bytes);
  }
  return r;
}

CUresult allocate_pointer(CUdeviceptr* dptr, uint64_t bytes, auto&& call) noexcept {
  static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t));
  zico_at_allocation();  // an iteration's first allocation may wait for tandemd (Zico)
  auto waiting_call = [&] {  // memory another job is about to free (Zico) is waited for
    CUresult r = call();
    for (uint64_t since = 0; r == CUDA_ERROR_OUT_OF_MEMORY && zico_memory_retry(since);) r = call();
    return r;
  };
  return allocate(&LiveAllocations::pointers, bytes, waiting_call, reinterpret_cast<uint64_t*>(dptr));
}

CUresult freed(CUresult r, CUdeviceptr dptr) noexcept {
  if (r == CUDA_SUCCESS && dptr) on_free(&LiveAllocations::pointers, dptr);
  return r;
}

// The memory pool (TANDEM_MEM_POOL=1) serves plain and stream-ordered allocations; the
// others (pitch, managed, pools of the application's own, VMM) always reach the driver.
// A stream-ordered allocation inside a stream capture becomes a graph node: the driver's. So
// does one on another device than the pool's (its chunks are mapped for their device only).
bool pooled(CUstream s, bool per_thread) noexcept {
  if (!pool_serves() || !pool_device_current()) return false;
  if (s == nullptr && !per_thread) return true;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = per_thread ? g_real.cuStreamIsCapturing_ptsz(s, &status) : g_real.cuStreamIsCapturing(s, &status);
  return r == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE;
}

// `stream`: a stream-ordered allocation's (pool_stream_tag), else none.
CUresult pool_alloc(CUdeviceptr* dptr, size_t size, const memory::StreamTag& stream = {}) noexcept {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = pool_charge(size);
  zico_at_allocation();  // an iteration's first allocation may wait for tandemd (Zico)
  if (!charge_memory(bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUdeviceptr p = pool_allocate(bytes, stream);
  for (uint64_t since = 0; !p && zico_memory_retry(since);) p = pool_allocate(bytes, stream);
  if (!p) {
    uncharge_memory(bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *dptr = p;
  count(memory_counters().allocs);
  return CUDA_SUCCESS;
}

// True when `dptr` was the pool's (then `r` is the answer).
bool pool_release(CUdeviceptr dptr, bool ordered, CUstream s, bool per_thread, CUresult& r) noexcept {
  if (!dptr || !pool_owns(dptr)) return false;
  uint64_t bytes = 0;
  memory::StreamTag tag = ordered ? pool_stream_tag(s, per_thread) : memory::StreamTag{};
  r = pool_free(dptr, ordered, s, per_thread, &bytes, tag) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    count(memory_counters().frees);
    uncharge_memory(bytes);
  }
  return true;
}

}  // namespace

void memory_tracker_reset_in_child() noexcept {
  // The parent's allocations are not the child's: forget them (the mutex may be held by a
  // thread that does not exist here, so the tracker is replaced, and the old one leaked).
  new (&live()) LiveAllocations();
}

CUresult hook_cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) noexcept {
  if (size && pooled(nullptr, false)) return pool_alloc(dptr, size);
  return allocate_pointer(dptr, size, [&] { return g_real.cuMemAlloc_v2(dptr, size); });
}

// The pitch is the driver's choice: width x height is charged against the quota first, the
// row padding afterwards whatever the quota (it is small).
CUresult hook_cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                 unsigned int elem) noexcept {
  uint64_t asked = static_cast<uint64_t>(width) * height;
  CUresult r = allocate_pointer(dptr, asked, [&] { return g_real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem); });
  if (r == CUDA_SUCCESS && dptr && pitch && *pitch > width) {
    uint64_t padding = static_cast<uint64_t>(*pitch - width) * height;
    charge_memory_unchecked(padding);
    std::lock_guard<std::mutex> lock(live().mutex);
    auto it = live().pointers.find(*dptr);
    if (it != live().pointers.end()) it->second += padding;
  }
  return r;
}

CUresult hook_cuMemFree_v2(CUdeviceptr dptr) noexcept {
  CUresult r;
  if (pool_release(dptr, false, nullptr, false, r)) return r;
  return freed(g_real.cuMemFree_v2(dptr), dptr);
}

// Stream-ordered: on the stream where `s`'s work is (a training stream's may be on a green
// context's stream, green_streams.h).
CUresult hook_cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) noexcept {
  s = green_op_stream(s, false);
  if (size && pooled(s, false)) return pool_alloc(dptr, size, pool_stream_tag(s, false));
  return allocate_pointer(dptr, size, [&] { return g_real.cuMemAllocAsync(dptr, size, s); });
}

CUresult hook_cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream s) noexcept {
  s = green_op_stream(s, true);
  if (size && pooled(s, true)) return pool_alloc(dptr, size, pool_stream_tag(s, true));
  return allocate_pointer(dptr, size, [&] { return g_real.cuMemAllocAsync_ptsz(dptr, size, s); });
}

CUresult hook_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                      CUstream s) noexcept {
  s = green_op_stream(s, false);
  return allocate_pointer(dptr, size, [&] { return g_real.cuMemAllocFromPoolAsync(dptr, size, pool, s); });
}

CUresult hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                           CUstream s) noexcept {
  s = green_op_stream(s, true);
  return allocate_pointer(dptr, size, [&] { return g_real.cuMemAllocFromPoolAsync_ptsz(dptr, size, pool, s); });
}

CUresult hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream s) noexcept {
  s = green_op_stream(s, false);
  CUresult r;
  if (pool_release(dptr, true, s, false, r)) return r;
  return freed(g_real.cuMemFreeAsync(dptr, s), dptr);
}

CUresult hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) noexcept {
  s = green_op_stream(s, true);
  CUresult r;
  if (pool_release(dptr, true, s, true, r)) return r;
  return freed(g_real.cuMemFreeAsync_ptsz(dptr, s), dptr);
}

CUresult hook_cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned int flags) noexcept {
  return allocate_pointer(dptr, size, [&] { return g_real.cuMemAllocManaged(dptr, size, flags); });
}

// VMM is counted by physical handle, never at reserve or map. NCCL calls cuMemCreate from
// threads without a current context and with host locations: nothing here needs a context,
// and host-located memory is counted as an allocation but is not device memory, so it is
// neither charged to the quota nor part of the bytes in use.
CUresult hook_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                          const CUmemAllocationProp* prop, unsigned long long flags) noexcept {
  static_assert(sizeof(CUmemGenericAllocationHandle) == sizeof(uint64_t));
  bool on_device = !prop || prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  return allocate(&LiveAllocations::handles, on_device ? size : 0,
                  [&] { return g_real.cuMemCreate(handle, size, prop, flags); }, reinterpret_cast<uint64_t*>(handle));
}

CUresult hook_cuMemRelease(CUmemGenericAllocationHandle handle) noexcept {
  CUresult r = g_real.cuMemRelease(handle);
  if (r == CUDA_SUCCESS) on_free(&LiveAllocations::handles, handle);
  return r;
}

// What frameworks take for the size of the GPU: the quota's view (quota_memory_view).
CUresult hook_cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) noexcept {
  CUresult r = g_real.cuMemGetInfo_v2(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || !free_bytes || !total_bytes) return r;
  uint64_t free = *free_bytes, total = *total_bytes, used = 0;
  if (!quota_memory_view(free, total, used)) return r;
  *free_bytes = free;
  *total_bytes = total;
  return r;
}

CUresult hook_cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) noexcept {
  CUresult r = g_real.cuDeviceTotalMem_v2(bytes, dev);
  uint64_t quota = memory_quota();
  if (r == CUDA_SUCCESS && bytes && quota && quota < *bytes) *bytes = quota;
  return r;
}

}  // namespace tandem::hook
