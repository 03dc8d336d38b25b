// Zeroing device memory without writing it. Device memory is host memory: cuMemAlloc'ed
// memory is a private anonymous mapping, VMM memory a memfd mapped shared. Dropping a page
// of either gives zeros on the next read: madvise(MADV_DONTNEED) for the anonymous mapping,
// MADV_REMOVE (a hole punched in the memfd, seen by every process mapping it) for the memfd.
// Writing instead cost a first touch of every page: ~1.2 s of CPU per GiB on the development
// machine, which made every zero-fill (the memory pool's handovers) as slow as the CPU.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "sim.h"

namespace simgpu {

namespace {

// Below this, writing is as cheap as a system call.
constexpr size_t kDropAtLeast = 64 << 10;

bool drop_pages(void* begin, size_t bytes) {
  auto p = reinterpret_cast<CUdeviceptr>(begin);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (mapping_of(p, &base, &size)) return madvise(begin, bytes, MADV_REMOVE) == 0;  // VMM: a shared memfd
  // cuMemAlloc'ed memory, and only when the whole range is one allocation: dropping pages of
  // any other private mapping (a file's) would bring back the file's bytes, not zeros.
  if (allocation_of(p, &base, &size) && p + bytes <= base + size) {
    // Shared through IPC (ipc.cpp): a memfd now, whose pages MADV_DONTNEED would bring back.
    if (shared_allocation(base)) return madvise(begin, bytes, MADV_REMOVE) == 0;
    return madvise(begin, bytes, MADV_DONTNEED) == 0;
  }
  return false;
}

}  // namespace

void zero_fill(void* dst, size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto first = reinterpret_cast<uintptr_t>(dst);
  uintptr_t begin = (first + page - 1) / page * page, end = (first + bytes) / page * page;
  if (bytes < kDropAtLeast || end <= begin) {
    std::memset(dst, 0, bytes);
    return;
  }
  // A failed drop leaves the range as it was (MADV_REMOVE fails before it punches): write it.
  if (!drop_pages(reinterpret_cast<void*>(begin), end - begin)) std::memset(reinterpret_cast<void*>(begin), 0, end - begin);
  std::memset(dst, 0, begin - first);
  std::memset(reinterpret_cast<void*>(end), 0, first + bytes - end);
}

}  // namespace simgpu
