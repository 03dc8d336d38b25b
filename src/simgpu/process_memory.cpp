// Publishes this process's device memory per simulated GPU (process_memory.h), for the
// simulated NVML. Called by memory.cpp under its allocation lock, so no lock of its own.
// Without shared memory nothing is published: NVML then sees no process on the GPU.
#include "process_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <csignal>

#include "sim.h"

namespace simgpu {

namespace {

constexpr int kMaxDevices = 16;
ProcessMemoryTable* g_tables[kMaxDevices];
bool g_unavailable[kMaxDevices];

bool alive(int32_t pid) { return process_alive(pid); }  // a process id of process_identity.cpp

ProcessMemoryTable* table(int device) {
  if (g_tables[device] || g_unavailable[device]) return g_tables[device];
  std::string name = process_memory_table_name(settings().shm_prefix.c_str(), device);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  void* p = MAP_FAILED;
  if (fd >= 0) {
    struct stat st {};
    if (fstat(fd, &st) == 0 && (st.st_size >= static_cast<off_t>(sizeof(ProcessMemoryTable)) ||
                                ftruncate(fd, sizeof(ProcessMemoryTable)) == 0))
      p = mmap(nullptr, sizeof(ProcessMemoryTable), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
  }
  auto* t = p == MAP_FAILED ? nullptr : static_cast<ProcessMemoryTable*>(p);
  uint32_t expected = 0;
  if (t && !t->magic.compare_exchange_strong(expected, kProcessMemoryMagic) && expected != kProcessMemoryMagic) t = nullptr;
  if (!t) {
    log(1, "shared memory %s unavailable: NVML will not see this process's memory", name.c_str());
    g_unavailable[device] = true;
  }
  g_tables[device] = t;
  return t;
}

// This process's row, by pid (a forked child has its own), or a free or dead process's row.
ProcessMemoryRow* my_row(ProcessMemoryTable* t) {
  int32_t me = process_id();
  for (ProcessMemoryRow& r : t->rows)
    if (r.pid.load() == me) return &r;
  for (ProcessMemoryRow& r : t->rows) {
    int32_t pid = r.pid.load();
    if ((pid == 0 || !alive(pid)) && r.pid.compare_exchange_strong(pid, me)) return &r;
  }
  return nullptr;
}

}  // namespace

// errno is kept: a driver call that succeeds leaves it alone (shm_open and kill may set it).
void publish_memory_use(int device, uint64_t bytes) {
  if (device < 0 || device >= kMaxDevices) return;
  int saved_errno = errno;
  if (ProcessMemoryTable* t = table(device))
    if (ProcessMemoryRow* row = my_row(t)) {
      row->os_pid.store(getpid());  // a forked child's, or the row's new owner's
      row->bytes.store(bytes);
    }
  errno = saved_errno;
}

uint64_t others_memory_use(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  int saved_errno = errno;
  uint64_t sum = 0;
  int32_t me = process_id();
  if (ProcessMemoryTable* t = table(device))
    for (ProcessMemoryRow& r : t->rows) {
      int32_t pid = r.pid.load();
      if (pid > 0 && pid != me && alive(pid)) sum += r.bytes.load();
    }
  errno = saved_errno;
  return sum;
}

}  // namespace simgpu
