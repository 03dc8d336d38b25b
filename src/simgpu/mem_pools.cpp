// Memory pools (cuMemPoolCreate, each device's default pool): a pool is a tag, since
// cuMemAllocFromPoolAsync allocates device memory whatever the pool. What a pool keeps is what
// programs read back: its properties, which devices may access its memory
// (cuMemPoolSetAccess / cuMemPoolGetAccess; the pool's own device always read-write), and, for
// a pool created with a POSIX file descriptor handle type, its export to another process:
// cuMemPoolExportToShareableHandle gives an fd naming the exporting process,
// cuMemPoolImportFromShareableHandle makes an imported pool from it, and a pointer exported
// with cuMemPoolExportPointer is mapped by cuMemPoolImportPointer through the same shared
// memory as legacy IPC (ipc.cpp); the importer frees it with cuMemFree[Async] (unmapped, the
// exporter's allocation unaffected). Simplified: the pointer's own pool is not checked.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>

#include "sim.h"

using namespace simgpu;

namespace {

struct Pool {
  uint32_t magic = 0x504f4f4c;
  CUmemPoolProps props{};
  bool imported = false;  // cuMemPoolImportFromShareableHandle
  std::map<int, CUmemAccess_flags> access;  // devices other than its own
};

Pool* as_pool(CUmemoryPool p) {
  auto* pool = reinterpret_cast<Pool*>(p);
  return pool && pool->magic == 0x504f4f4c ? pool : nullptr;
}

ProcessMutex g_mutex;
Pool* g_default[16];

// What the shareable fd of a pool holds (a small memfd), and a CUmemPoolPtrExportData.
constexpr uint32_t kPoolMagic = 0x53504f4c;
struct PoolRecord {
  uint32_t magic;
  int32_t pid;
  int32_t device;
};
constexpr uint32_t kPointerMagic = 0x53505452;
struct PointerRecord {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  uint32_t reserved;
  uint64_t size, offset;
};
static_assert(sizeof(PointerRecord) <= sizeof(CUmemPoolPtrExportData), "fits the export data");

}  // namespace

SIM_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(props->location.id))
    return CUDA_ERROR_INVALID_DEVICE;
  auto* p = new Pool();
  p->props = *props;
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  Pool* p = as_pool(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  p->magic = 0;
  delete p;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (!pool || !valid_device(dev) || dev >= 16) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_default[dev]) {
    g_default[dev] = new Pool();  // never destroyed (cuMemPoolDestroy refuses nothing, but nobody calls it)
    g_default[dev]->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    g_default[dev]->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    g_default[dev]->props.location.id = dev;
  }
  *pool = reinterpret_cast<CUmemoryPool>(g_default[dev]);
  return CUDA_SUCCESS;
}

// ---- access from other devices ----
SIM_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  Pool* p = as_pool(pool);
  if (!p || (count && !map)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& d = map[i];
    if (d.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(d.location.id)) return CUDA_ERROR_INVALID_DEVICE;
    if (d.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        d.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
    // The pool's own device always has read-write access; it cannot be taken away.
    bool own = p->props.location.type == CU_MEM_LOCATION_TYPE_DEVICE && d.location.id == p->props.location.id;
    if (own && d.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_DEVICE;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  for (size_t i = 0; i < count; ++i) p->access[map[i].location.id] = map[i].flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool pool, CUmemLocation* location) {
  Pool* p = as_pool(pool);
  if (!p || !flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(location->id)) return CUDA_ERROR_INVALID_DEVICE;
  if (p->props.location.type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == p->props.location.id) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = p->access.find(location->id);
  *flags = it == p->access.end() ? CU_MEM_ACCESS_FLAGS_PROT_NONE : it->second;
  return CUDA_SUCCESS;
}

// ---- export to other processes ----
SIM_API CUresult cuMemPoolExportToShareableHandle(void* handle, CUmemoryPool pool, CUmemAllocationHandleType type,
                                                  unsigned long long flags) {
  Pool* p = as_pool(pool);
  if (!p || !handle || flags) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // cuda.h: only a pool created with this handle type can be exported (not a default pool).
  if (!(p->props.handleTypes & type) || p->imported) return CUDA_ERROR_INVALID_VALUE;
  int fd = memfd_create("simgpu-pool", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  PoolRecord rec{kPoolMagic, getpid(), p->props.location.id};
  if (write(fd, &rec, sizeof rec) != static_cast<ssize_t>(sizeof rec)) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *static_cast<int*>(handle) = fd;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool, void* handle, CUmemAllocationHandleType type,
                                                    unsigned long long flags) {
  if (!pool || flags) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(handle));  // the fd, by value
  PoolRecord rec{};
  if (pread(fd, &rec, sizeof rec, 0) != static_cast<ssize_t>(sizeof rec) || rec.magic != kPoolMagic)
    return CUDA_ERROR_INVALID_VALUE;
  auto* p = new Pool();
  p->imported = true;
  p->props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p->props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  p->props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p->props.location.id = rec.device;
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData* out, CUdeviceptr ptr) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr base;
  int fd;
  size_t size;
  CUresult r = share_allocation(ptr, &base, &fd, &size);  // ipc.cpp
  if (r != CUDA_SUCCESS) return r;
  std::memset(out, 0, sizeof *out);
  PointerRecord rec{kPointerMagic, getpid(), fd, 0, size, ptr - base};
  std::memcpy(out->reserved, &rec, sizeof rec);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolImportPointer(CUdeviceptr* out, CUmemoryPool pool, CUmemPoolPtrExportData* data) {
  Pool* p = as_pool(pool);
  if (!out || !p || !data || !p->imported) return CUDA_ERROR_INVALID_VALUE;
  PointerRecord rec;
  std::memcpy(&rec, data->reserved, sizeof rec);
  if (rec.magic != kPointerMagic || rec.offset >= rec.size) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr base;
  CUresult r = open_shared(rec.pid, rec.fd, rec.size, &base);  // ipc.cpp
  if (r != CUDA_SUCCESS) return r;
  *out = base + rec.offset;
  return CUDA_SUCCESS;
}
