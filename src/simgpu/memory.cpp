// Device memory is host memory (device pointer == host address), so copies are memcpy. An
// allocation table validates frees and ranges; the device total (SIMGPU_MEM_BYTES) is
// enforced. Async variants are ordered on their stream.
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <set>

#include "sim.h"

namespace simgpu {
namespace {

ProcessMutex g_mutex;
std::map<uint64_t, size_t>* g_allocs = new std::map<uint64_t, size_t>();  // never destroyed
uint64_t g_used = 0;
// Per GPU, for the simulated NVML: the device of each tracked allocation (the current
// context's when it was made) and this process's bytes on each device.
std::map<uint64_t, int>* g_alloc_device = new std::map<uint64_t, int>();  // never destroyed
uint64_t g_used_on[16];
// Graph allocations' addresses (reserve_graph_address): in the table, so that copies and
// memsets naming them are valid, but not counted; their graph's launch counts them.
std::set<uint64_t>* g_uncounted = new std::set<uint64_t>();  // never destroyed

int allocating_device() {
  Context* c = current_context();
  return c && c->device >= 0 && c->device < 16 ? c->device : 0;
}

// SIMGPU_MEM_SHARED: the GPU's memory is one budget, this process's use plus what the others
// published. Not atomic across processes (two may pass together): a simulator's approximation.
bool room_on_gpu(int device, uint64_t bytes) {
  return g_used_on[device] + others_memory_use(device) + bytes <= settings().mem_bytes;
}

CUresult allocate(CUdeviceptr* p, size_t bytes, const char* api) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (should_fail(api)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_used + bytes > settings().mem_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (settings().mem_shared && !room_on_gpu(allocating_device(), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  // Lazily committed anonymous pages: large allocations cost nothing until touched.
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  (*g_allocs)[reinterpret_cast<uint64_t>(m)] = bytes;
  g_used += bytes;
  int device = allocating_device();
  (*g_alloc_device)[reinterpret_cast<uint64_t>(m)] = device;
  publish_memory_use(device, g_used_on[device] += bytes);
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr p) {
  if (p == 0) return CUDA_SUCCESS;
  // Another process's pool memory imported here (cuMemPoolImportPointer) is freed by unmapping
  // it (ipc.cpp); the exporter's allocation is unaffected.
  CUdeviceptr imported = 0;
  if (imported_range(p, &imported, nullptr)) return imported == p ? close_shared(p) : CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocs->find(p);
  if (it == g_allocs->end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(p), it->second);
  forget_shared_allocation(p);  // ipc.cpp: an exported allocation's memfd
  forget_communicators(p, it->second);  // collectives.cpp
  if (!g_uncounted->erase(p)) g_used -= it->second;
  if (auto d = g_alloc_device->find(p); d != g_alloc_device->end()) {
    publish_memory_use(d->second, g_used_on[d->second] -= it->second);
    g_alloc_device->erase(d);
  }
  g_allocs->erase(it);
  return CUDA_SUCCESS;
}

CUresult copy(void* dst, const void* src, size_t bytes, CUstream s, bool async, bool per_thread) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = resolve_stream(s, per_thread);
  Op op;
  op.kind = Op::copy;
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  CUresult r = submit(st, op);
  if (r != CUDA_SUCCESS || async || st->capture) return r;
  return synchronize_stream(st);
}

CUresult set(CUdeviceptr dst, uint32_t value, size_t elem, size_t count, CUstream s, bool async, bool per_thread) {
  if (count == 0) return CUDA_SUCCESS;
  if (!dst) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = resolve_stream(s, per_thread);
  Op op;
  op.kind = Op::set;
  op.dst = reinterpret_cast<void*>(dst);
  op.value = value;
  op.elem = elem;
  op.count = count;
  op.launch.device = allocating_device();  // a memset runs on the current context's GPU, as a kernel does
  CUresult r = submit(st, op);
  if (r != CUDA_SUCCESS || async || st->capture) return r;
  return synchronize_stream(st);
}

}  // namespace

CUresult allocate_device(CUdeviceptr* p, size_t bytes, const char* api) { return allocate(p, bytes, api); }
CUresult release_device(CUdeviceptr p) { return release(p); }

CUresult reserve_graph_address(CUdeviceptr* p, size_t bytes) {
  if (should_fail("cuGraphAddMemAllocNode")) return CUDA_ERROR_OUT_OF_MEMORY;  // as before, for captures too
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_mutex);
  (*g_allocs)[reinterpret_cast<uint64_t>(m)] = bytes;
  g_uncounted->insert(reinterpret_cast<uint64_t>(m));
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}

bool charge_device_memory(int device, uint64_t bytes) {
  if (device < 0 || device >= 16) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_used + bytes > settings().mem_bytes) return false;
  if (settings().mem_shared && !room_on_gpu(device, bytes)) return false;
  g_used += bytes;
  publish_memory_use(device, g_used_on[device] += bytes);
  return true;
}

void uncharge_device_memory(int device, uint64_t bytes) {
  if (device < 0 || device >= 16) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_used -= bytes;
  publish_memory_use(device, g_used_on[device] -= bytes);
}

bool charge_vmm(int device, uint64_t bytes, bool check) {
  if (!settings().mem_shared || device < 0 || device >= 16) return true;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (check && !room_on_gpu(device, bytes)) return false;
  publish_memory_use(device, g_used_on[device] += bytes);
  return true;
}

void uncharge_vmm(int device, uint64_t bytes) {
  if (!settings().mem_shared || device < 0 || device >= 16) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  publish_memory_use(device, g_used_on[device] -= bytes);
}

CUdeviceptr allocate_untracked(size_t bytes) {
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  (*g_allocs)[reinterpret_cast<uint64_t>(m)] = bytes;
  return reinterpret_cast<CUdeviceptr>(m);
}

bool allocation_of(CUdeviceptr p, CUdeviceptr* base, size_t* bytes) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_allocs->upper_bound(p);
    if (it != g_allocs->begin() && p < std::prev(it)->first + std::prev(it)->second) {
      if (base) *base = std::prev(it)->first;
      if (bytes) *bytes = std::prev(it)->second;
      return true;
    }
  }
  // cuMemMap'ed memory (vmm.cpp), another process's memory opened through IPC (ipc.cpp).
  return mapping_of(p, base, bytes) || imported_range(p, base, bytes);
}

bool valid_device_range(CUdeviceptr p, size_t bytes) {
  CUdeviceptr base;
  size_t size;
  return allocation_of(p, &base, &size) && p + bytes <= base + size;
}

}  // namespace simgpu

using namespace simgpu;

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) { return allocate(p, bytes, "cuMemAlloc"); }
SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr* p, size_t* pitch, size_t width, size_t height, unsigned elem) {
  if (!pitch || elem == 0) return CUDA_ERROR_INVALID_VALUE;
  *pitch = (width + 511) & ~static_cast<size_t>(511);
  return allocate(p, *pitch * height, "cuMemAllocPitch");
}
SIM_API CUresult cuMemFree_v2(CUdeviceptr p) {
  synchronize_all();  // cuMemFree synchronizes, as on a real GPU
  if (is_graph_allocation(p)) return CUDA_SUCCESS;  // graph_memory.cpp: its graph keeps it for the next launch
  return release(p);
}
SIM_API CUresult cuMemAllocManaged(CUdeviceptr* p, size_t bytes, unsigned flags) {
  (void)flags;
  return allocate(p, bytes, "cuMemAllocManaged");
}
#define ASYNC_PAIR(name, params, call)                                            \
  SIM_API CUresult name params { const bool per_thread = false; return call; }     \
  SIM_API CUresult name##_ptsz params { const bool per_thread = true; return call; }

// Inside a capture an allocation becomes the graph's alloc node and a free its free node
// (graph_memory.cpp): the memory must outlive the capture, since every launch of the graph
// copies into it. (Freeing it here, as before, left the graph's copies writing to unmapped
// memory: a SIGSEGV on the first launch.)
static CUresult alloc_async(CUdeviceptr* p, size_t bytes, CUstream s, bool per_thread) {
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!st->capture) return allocate(p, bytes, "cuMemAllocAsync");
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = allocating_device();
  params.bytesize = bytes;
  std::unique_ptr<GraphNode> node;
  CUresult r = graph_allocate(params, &node);
  if (r != CUDA_SUCCESS) return r;
  *p = node->alloc_params.dptr;
  append_captured_node(st, std::move(node));
  return CUDA_SUCCESS;
}
static CUresult free_async(CUdeviceptr p, CUstream s, bool per_thread) {
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_device_range(p, 1)) return CUDA_ERROR_INVALID_VALUE;
  if (st->capture) {
    // cuda.h: during capture the free becomes a free node, and must name a graph allocation.
    std::unique_ptr<GraphNode> node;
    CUresult r = graph_free_node(p, &node);
    if (r == CUDA_SUCCESS) append_captured_node(st, std::move(node));
    return r;
  }
  synchronize_stream(st);  // stream-ordered: free after the work queued before it
  if (is_graph_allocation(p)) return CUDA_SUCCESS;  // freed after a launch: the graph keeps it
  return release(p);
}
ASYNC_PAIR(cuMemAllocAsync, (CUdeviceptr* p, size_t bytes, CUstream s), alloc_async(p, bytes, s, per_thread))
ASYNC_PAIR(cuMemAllocFromPoolAsync, (CUdeviceptr* p, size_t bytes, CUmemoryPool pool, CUstream s),
           alloc_async(p, bytes, s, per_thread))
ASYNC_PAIR(cuMemFreeAsync, (CUdeviceptr p, CUstream s), free_async(p, s, per_thread))

SIM_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (total) *total = settings().mem_bytes;
  if (free_bytes) *free_bytes = settings().mem_bytes - g_used;
  if (free_bytes && settings().mem_shared) {  // the whole GPU's use, VMM memory included
    int device = allocating_device();
    uint64_t used = g_used_on[device] + others_memory_use(device);
    *free_bytes = used < settings().mem_bytes ? settings().mem_bytes - used : 0;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocHost_v2(void** p, size_t bytes) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = std::malloc(bytes ? bytes : 1);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
SIM_API CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned flags) {
  (void)flags;
  return cuMemAllocHost_v2(p, bytes);
}
SIM_API CUresult cuMemFreeHost(void* p) {
  std::free(p);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned flags) {
  (void)p, (void)bytes, (void)flags;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuMemHostUnregister(void* p) {
  (void)p;
  return CUDA_SUCCESS;
}

// Synchronous copies (the _ptds twins use the per-thread default stream).
#define SYNC_COPY(name, params, dst, src, bytes)                                                  \
  SIM_API CUresult name params { SIM_FAIL_POINT(); return copy(dst, src, bytes, nullptr, false, false); }           \
  SIM_API CUresult name##_ptds params { SIM_FAIL_POINT(); return copy(dst, src, bytes, nullptr, false, true); }
SYNC_COPY(cuMemcpyHtoD_v2, (CUdeviceptr d, const void* h, size_t n), reinterpret_cast<void*>(d), h, n)
SYNC_COPY(cuMemcpyDtoH_v2, (void* h, CUdeviceptr d, size_t n), h, reinterpret_cast<const void*>(d), n)
SYNC_COPY(cuMemcpyDtoD_v2, (CUdeviceptr a, CUdeviceptr b, size_t n), reinterpret_cast<void*>(a),
          reinterpret_cast<const void*>(b), n)
SYNC_COPY(cuMemcpy, (CUdeviceptr a, CUdeviceptr b, size_t n), reinterpret_cast<void*>(a),
          reinterpret_cast<const void*>(b), n)

#define ASYNC_COPY(name, params, dst, src, bytes)                                                 \
  SIM_API CUresult name params { SIM_FAIL_POINT(); return copy(dst, src, bytes, s, true, false); }                  \
  SIM_API CUresult name##_ptsz params { SIM_FAIL_POINT(); return copy(dst, src, bytes, s, true, true); }
ASYNC_COPY(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void* h, size_t n, CUstream s),
           reinterpret_cast<void*>(d), h, n)
ASYNC_COPY(cuMemcpyDtoHAsync_v2, (void* h, CUdeviceptr d, size_t n, CUstream s), h,
           reinterpret_cast<const void*>(d), n)
ASYNC_COPY(cuMemcpyDtoDAsync_v2, (CUdeviceptr a, CUdeviceptr b, size_t n, CUstream s),
           reinterpret_cast<void*>(a), reinterpret_cast<const void*>(b), n)
ASYNC_COPY(cuMemcpyAsync, (CUdeviceptr a, CUdeviceptr b, size_t n, CUstream s), reinterpret_cast<void*>(a),
           reinterpret_cast<const void*>(b), n)

#define SYNC_SET(name, type, elem)                                                                     \
  SIM_API CUresult name(CUdeviceptr d, type v, size_t n) { return set(d, v, elem, n, nullptr, false, false); } \
  SIM_API CUresult name##_ptds(CUdeviceptr d, type v, size_t n) { return set(d, v, elem, n, nullptr, false, true); }
SYNC_SET(cuMemsetD8_v2, unsigned char, 1)
SYNC_SET(cuMemsetD16_v2, unsigned short, 2)
SYNC_SET(cuMemsetD32_v2, unsigned int, 4)
#define ASYNC_SET(name, type, elem)                                                                   \
  SIM_API CUresult name(CUdeviceptr d, type v, size_t n, CUstream s) { return set(d, v, elem, n, s, true, false); } \
  SIM_API CUresult name##_ptsz(CUdeviceptr d, type v, size_t n, CUstream s) { return set(d, v, elem, n, s, true, true); }
ASYNC_SET(cuMemsetD8Async, unsigned char, 1)
ASYNC_SET(cuMemsetD16Async, unsigned short, 2)
ASYNC_SET(cuMemsetD32Async, unsigned int, 4)

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* bytes, CUdeviceptr p) {
  return allocation_of(p, base, bytes) ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  bool device = valid_device_range(p, 1);
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(primary_context(0));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = reinterpret_cast<void*>(p); return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<int*>(data) = 0; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = p; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      return allocation_of(p, static_cast<CUdeviceptr*>(data), nullptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      return allocation_of(p, nullptr, static_cast<size_t*>(data)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<int*>(data) = device; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = 0; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = p; return CUDA_SUCCESS;
    // cuMemAlloc'ed memory could be shared with cuIpcGetMemHandle on a real GPU; cuMemMap'ed not.
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      if (!device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<int*>(data) = !mapping_of(p, nullptr, nullptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *static_cast<int*>(data) = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// Attributes a host pointer does not have read as zero, as the real driver reports them.
SIM_API CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** data, CUdeviceptr p) {
  if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) {
    if (!data[i]) continue;
    if (cuPointerGetAttribute(data[i], attrs[i], p) != CUDA_SUCCESS) {
      size_t width = attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL ||
                             attrs[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED || attrs[i] == CU_POINTER_ATTRIBUTE_MAPPED
                         ? 4 : 8;
      std::memset(data[i], 0, width);
    }
  }
  return CUDA_SUCCESS;
}
