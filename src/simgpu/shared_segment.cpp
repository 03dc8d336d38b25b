// Named shared-memory segments the simulated GPUs' processes meet in (the GPUs' contention
// state, NCCL's collective and point-to-point tables). See sim.h.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "sim.h"

namespace simgpu {

void* map_shared_segment(const std::string& name, size_t bytes, uint32_t magic) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) return nullptr;
  void* p = MAP_FAILED;
  struct stat st {};
  // Growing only: another process may already use the segment, and zeros are every layout's
  // idle state.
  if (fstat(fd, &st) == 0 && (st.st_size >= static_cast<off_t>(bytes) || ftruncate(fd, static_cast<off_t>(bytes)) == 0))
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  // The first word names the layout: the first process to map the segment writes it.
  auto* word = static_cast<std::atomic<uint32_t>*>(p);
  uint32_t expected = 0;
  if (!word->compare_exchange_strong(expected, magic) && expected != magic) {
    munmap(p, bytes);
    return nullptr;
  }
  return p;
}

}  // namespace simgpu
