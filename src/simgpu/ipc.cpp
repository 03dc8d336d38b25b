// Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle, and event
// handles) and the memory it shares, also used by memory pools' exported pointers
// (mem_pools.cpp). cuMemAlloc'ed memory is a private anonymous mapping, which no other process
// can map. Exporting an allocation therefore makes it shareable in place, once: its resident
// pages are copied into a memfd, which is then mapped over the same addresses (MAP_FIXED), so
// the exporter's pointers keep working. The handle names the exporter's pid and that fd; an
// importer opens /proc/<pid>/fd/<fd> (the same user, the same PID namespace, the exporter
// alive) and maps it: both see the same bytes. Simplified: pages swapped out at the moment of
// the export read as zeros afterwards (mincore() counts them as never touched), and opening a
// handle in the process that exported it fails with CUDA_ERROR_INVALID_CONTEXT, as on a GPU.
// Event handles carry no cross-process ordering: the opened event is complete from the start.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "sim.h"

namespace simgpu {

namespace {

constexpr uint32_t kMemMagic = 0x53495043;  // "SIPC"
constexpr uint32_t kEventMagic = 0x53495045;

// What a CUipcMemHandle (64 bytes) holds.
struct SharedRef {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  uint32_t reserved;
  uint64_t size;
  uint64_t offset;  // of the exported pointer in its allocation
};
static_assert(sizeof(SharedRef) <= sizeof(CUipcMemHandle), "fits a CUipcMemHandle");

struct Exported {
  int fd;
  size_t size;
};
struct Imported {
  size_t size;
  int refs;
  int32_t pid, fd;  // what it was opened from, so that opening it again shares the mapping
};

ProcessMutex g_mutex;
auto* g_exported = new std::map<CUdeviceptr, Exported>();  // by allocation base; never destroyed
auto* g_imported = new std::map<CUdeviceptr, Imported>();  // by mapped base; never destroyed

// Copies the pages of [src, src + size) that were ever touched into the mapping at dst.
void copy_resident(unsigned char* dst, const unsigned char* src, size_t size) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  if (mincore(const_cast<unsigned char*>(src), size, resident.data()) != 0) {
    std::memcpy(dst, src, size);  // cannot tell: copy everything
    return;
  }
  for (size_t i = 0; i < resident.size(); ++i)
    if (resident[i] & 1) std::memcpy(dst + i * page, src + i * page, std::min(page, size - i * page));
}

}  // namespace

CUresult share_allocation(CUdeviceptr p, CUdeviceptr* base_out, int* fd_out, size_t* size_out) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!allocation_of(p, &base, &size) || mapping_of(p, nullptr, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  // No copy or memset may write the old pages while they move. Waited for before the lock:
  // a stream's memset asks shared_allocation() (zero_fill.cpp), which takes it.
  if (!shared_allocation(base)) synchronize_all();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_imported->count(base)) return CUDA_ERROR_INVALID_VALUE;  // another process's memory
  auto it = g_exported->find(base);
  if (it == g_exported->end()) {
    int fd = memfd_create("simgpu-ipc", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    void* staging = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(size)) == 0)
      staging = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (staging == MAP_FAILED) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto* at = reinterpret_cast<unsigned char*>(base);
    copy_resident(static_cast<unsigned char*>(staging), at, size);
    munmap(staging, size);
    if (mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    it = g_exported->emplace(base, Exported{fd, size}).first;
  }
  *base_out = base;
  *fd_out = it->second.fd;
  *size_out = it->second.size;
  return CUDA_SUCCESS;
}

bool shared_allocation(CUdeviceptr base) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_exported->count(base) || g_imported->count(base);
}

void forget_shared_allocation(CUdeviceptr base) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_exported->find(base);
  if (it == g_exported->end()) return;
  close(it->second.fd);
  g_exported->erase(it);
}

bool imported_range(CUdeviceptr p, CUdeviceptr* base, size_t* bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_imported->upper_bound(p);
  if (it == g_imported->begin()) return false;
  --it;
  if (p >= it->first + it->second.size) return false;
  if (base) *base = it->first;
  if (bytes) *bytes = it->second.size;
  return true;
}

CUresult open_shared(int32_t pid, int32_t fd, size_t size, CUdeviceptr* out) {
  if (pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // a GPU refuses its own process's handles
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [base, m] : *g_imported)
    if (m.pid == pid && m.fd == fd && m.size == size) {  // opened already: the same pointer (cuda.h)
      ++m.refs;
      *out = base;
      return CUDA_SUCCESS;
    }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  int own = open(path, O_RDWR | O_CLOEXEC);
  if (own < 0) return CUDA_ERROR_INVALID_HANDLE;  // the exporter is gone, or cannot be reached
  void* m = MAP_FAILED;
  struct stat st{};
  if (fstat(own, &st) == 0 && static_cast<size_t>(st.st_size) >= size)
    m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  close(own);  // the mapping keeps the memory
  if (m == MAP_FAILED) return CUDA_ERROR_INVALID_HANDLE;
  auto base = reinterpret_cast<CUdeviceptr>(m);
  (*g_imported)[base] = Imported{size, 1, pid, fd};
  *out = base;
  return CUDA_SUCCESS;
}

CUresult close_shared(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_imported->find(p);
  if (it == g_imported->end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.refs > 0) return CUDA_SUCCESS;
  munmap(reinterpret_cast<void*>(p), it->second.size);
  g_imported->erase(it);
  return CUDA_SUCCESS;
}

}  // namespace simgpu

using namespace simgpu;

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr base;
  int fd;
  size_t size;
  CUresult r = share_allocation(p, &base, &fd, &size);
  if (r != CUDA_SUCCESS) return r;
  std::memset(h, 0, sizeof *h);
  // The handle names the whole allocation: the importer gets its base (cuda.h: dptr is a base).
  SharedRef ref{kMemMagic, getpid(), fd, 0, size, 0};
  std::memcpy(h->reserved, &ref, sizeof ref);
  return CUDA_SUCCESS;
}

static CUresult ipc_open(CUdeviceptr* p, CUipcMemHandle h, unsigned flags) {
  if (!p || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
  SharedRef ref;
  std::memcpy(&ref, h.reserved, sizeof ref);
  if (ref.magic != kMemMagic || ref.size == 0) return CUDA_ERROR_INVALID_VALUE;
  return open_shared(ref.pid, ref.fd, ref.size, p);
}
SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* p, CUipcMemHandle h, unsigned flags) { return ipc_open(p, h, flags); }
SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr* p, CUipcMemHandle h, unsigned flags) { return ipc_open(p, h, flags); }

SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  synchronize_all();  // work queued on the mapping ends first
  return close_shared(p);
}

// Event handles: cuda.h requires an event created with CU_EVENT_INTERPROCESS and
// CU_EVENT_DISABLE_TIMING.
SIM_API CUresult cuIpcGetEventHandle(CUipcEventHandle* h, CUevent e) {
  auto* ev = reinterpret_cast<Event*>(e);
  if (!h) return CUDA_ERROR_INVALID_VALUE;
  if (!ev || ev->magic != 0x45564e54) return CUDA_ERROR_INVALID_HANDLE;
  if ((ev->flags & (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING)) != (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;
  std::memset(h, 0, sizeof *h);
  uint32_t magic = kEventMagic;
  int32_t pid = getpid();
  std::memcpy(h->reserved, &magic, 4);
  std::memcpy(h->reserved + 4, &pid, 4);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuIpcOpenEventHandle(CUevent* e, CUipcEventHandle h) {
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  uint32_t magic;
  int32_t pid;
  std::memcpy(&magic, h.reserved, 4);
  std::memcpy(&pid, h.reserved + 4, 4);
  if (magic != kEventMagic) return CUDA_ERROR_INVALID_VALUE;
  if (pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  return cuEventCreate(e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
}
