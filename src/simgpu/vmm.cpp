// Virtual memory management with real cross-process sharing: a physical allocation is a
// memfd; exporting it hands out a dup of the fd, which another process imports and maps.
// Reserved ranges are PROT_NONE address space; mappings start inaccessible until
// cuMemSetAccess, as on a real GPU.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include "sim.h"

namespace simgpu {
namespace {

struct Physical {
  uint32_t magic = 0x50485953;
  int fd = -1;
  size_t size = 0;
  CUmemAllocationProp prop{};
  std::atomic<int> refs{1};
  int charged_device = -1;  // SIMGPU_MEM_SHARED: the device whose budget counts it (-1: none)
};

constexpr size_t kGranularity = 2 << 20;

Physical* as_physical(CUmemGenericAllocationHandle h) {
  auto* p = reinterpret_cast<Physical*>(h);
  return p && p->magic == 0x50485953 ? p : nullptr;
}

void unref(Physical* p) {
  if (p->refs.fetch_sub(1) == 1) {
    if (p->charged_device >= 0) uncharge_vmm(p->charged_device, p->size);
    close(p->fd);
    p->magic = 0;
    delete p;
  }
}

// Mapped ranges, so that an address leads back to its allocation (cuMemRetainAllocationHandle,
// cuMemGetAddressRange). A mapping holds a reference on its allocation, as on a real GPU: the
// memory stays until it is unmapped, whatever cuMemRelease was called before.
struct Mapping {
  Physical* physical;
  size_t size;
};
ProcessMutex g_mappings_mutex;
std::map<CUdeviceptr, Mapping>* g_mappings = new std::map<CUdeviceptr, Mapping>();  // never destroyed

}  // namespace

bool mapping_of(CUdeviceptr p, CUdeviceptr* base, size_t* bytes) {
  std::lock_guard<std::mutex> lock(g_mappings_mutex);
  auto it = g_mappings->upper_bound(p);
  if (it == g_mappings->begin()) return false;
  --it;
  if (p >= it->first + it->second.size) return false;
  if (base) *base = it->first;
  if (bytes) *bytes = it->second.size;
  return true;
}

}  // namespace simgpu

using namespace simgpu;

SIM_API CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags opt) {
  (void)opt;
  if (!g || !prop) return CUDA_ERROR_INVALID_VALUE;
  *g = kGranularity;
  return CUDA_SUCCESS;
}

// No current context is needed: NCCL calls this from helper threads, with host locations too.
SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  (void)flags;
  SIM_FAIL_POINT();
  if (!handle || !prop || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  // Device memory counts against the GPU's budget (SIMGPU_MEM_SHARED); host locations do not.
  int device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
  if (!charge_vmm(device, size, true)) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("simgpu-chunk", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    uncharge_vmm(device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto* p = new Physical();
  p->fd = fd;
  p->size = size;
  p->prop = *prop;
  p->charged_device = settings().mem_shared ? device : -1;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Physical* p = as_physical(handle);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  unref(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type, unsigned long long flags) {
  (void)flags;
  Physical* p = as_physical(handle);
  if (!p || !shareable) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = dup(p->fd);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                                CUmemAllocationHandleType type) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));  // the fd, by value
  off_t size = lseek(fd, 0, SEEK_END);
  if (size <= 0) return CUDA_ERROR_INVALID_VALUE;
  int own = dup(fd);
  if (own < 0) return CUDA_ERROR_INVALID_VALUE;
  auto* p = new Physical();
  p->fd = own;
  p->size = static_cast<size_t>(size);
  p->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  // The memory exists already (another process made it): counted from now on, never refused.
  // A chunk no process holds (waiting in tandemd's pool) counts for nobody.
  if (settings().mem_shared && charge_vmm(0, p->size, false)) p->charged_device = 0;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle h) {
  Physical* p = as_physical(h);
  if (!p || !prop) return CUDA_ERROR_INVALID_VALUE;
  *prop = p->prop;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  (void)flags;
  if (!ptr || size == 0 || size % kGranularity) return CUDA_ERROR_INVALID_VALUE;
  size_t align = alignment > kGranularity ? alignment : kGranularity;
  // Over-reserve, then trim to the alignment.
  void* base = mmap(reinterpret_cast<void*>(addr), size + align, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t b = reinterpret_cast<uintptr_t>(base);
  uintptr_t aligned = (b + align - 1) & ~(align - 1);
  if (aligned > b) munmap(base, aligned - b);
  if (b + size + align > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), b + size + align - aligned - size);
  *ptr = aligned;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                          unsigned long long flags) {
  (void)flags;
  Physical* p = as_physical(h);
  if (!p || !ptr || offset != 0 || size > p->size) return CUDA_ERROR_INVALID_VALUE;
  void* m = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  p->refs.fetch_add(1);
  std::lock_guard<std::mutex> lock(g_mappings_mutex);
  (*g_mappings)[ptr] = Mapping{p, size};
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  // Back to reserved-but-unmapped address space.
  void* m = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Physical*> unmapped;
  {
    std::lock_guard<std::mutex> lock(g_mappings_mutex);
    for (auto it = g_mappings->lower_bound(ptr); it != g_mappings->end() && it->first < ptr + size;) {
      unmapped.push_back(it->second.physical);
      it = g_mappings->erase(it);
    }
  }
  for (Physical* p : unmapped) unref(p);
  forget_communicators(ptr, size);  // collectives.cpp
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!ptr || !desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE) prot = PROT_READ;
  }
  return mprotect(reinterpret_cast<void*>(ptr), size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mappings_mutex);
  auto it = g_mappings->upper_bound(reinterpret_cast<CUdeviceptr>(addr));
  if (it == g_mappings->begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (reinterpret_cast<CUdeviceptr>(addr) >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  it->second.physical->refs.fetch_add(1);  // released by the caller's cuMemRelease
  *h = reinterpret_cast<CUmemGenericAllocationHandle>(it->second.physical);
  return CUDA_SUCCESS;
}
