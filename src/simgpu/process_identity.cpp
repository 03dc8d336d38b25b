// Which process of the simulated GPU is which, across PID namespaces (docs/simgpu.md). The
// GPU's shared tables (contention slots, memory rows, collective arrivals) name processes and
// reclaim the rows of dead ones. A pid cannot do that between containers: two of them may each
// run a pid 7, and kill(pid, 0) does not reach a process of another namespace. So each process
// holds one byte of a lock file beside the GPU's segments (<SIMGPU_SHM>-procs, in /dev/shm)
// with an open-file-description lock, and writes its id in the file: the byte's number + 1 in
// the low 12 bits, a random tag above them, so that an id a dead process left in a shared table
// does not name the next process to take its byte. A process is alive while its byte is locked
// (the kernel drops the lock when the process dies, whatever namespace it ran in) and the id
// written for it is its own. A forked child claims its own on first use and lets go of its copy
// of the parent's. Without the lock file (no /dev/shm): pids, and kill(pid, 0).
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sim.h"

namespace simgpu {

namespace {

constexpr int32_t kMaxProcesses = 4095;  // an index + 1 fits the id's low 12 bits
constexpr off_t kIds = 4096;              // where the ids are written: one int32 per byte, after the bytes

std::atomic<int32_t> g_id{0};  // 0: none claimed yet (or a forked child's, reset at the fork)
int g_fd = -1;
bool g_by_pid = false;
ProcessMutex g_mutex;

void forget_in_child() {
  if (g_fd >= 0) close(g_fd);  // the parent's lock stays its own: it has its own descriptor
  g_fd = -1;
  g_id.store(0);
}

int32_t claim() {
  static bool registered = false;
  if (!registered) registered = pthread_atfork(nullptr, nullptr, forget_in_child) == 0;
  if (g_fd >= 0) close(g_fd);
  std::string name = settings().shm_prefix + "-procs";
  g_fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);  // close-on-exec
  if (g_fd >= 0)
    for (int32_t i = 0; i < kMaxProcesses; ++i) {
      struct flock byte {};
      byte.l_type = F_WRLCK;
      byte.l_whence = SEEK_SET;
      byte.l_start = i;
      byte.l_len = 1;
      if (fcntl(g_fd, F_OFD_SETLK, &byte) != 0) continue;
      int32_t tag = static_cast<int32_t>((now_ns() ^ (static_cast<uint64_t>(getpid()) * 2654435761u)) % 0x7ffff) + 1;
      int32_t id = tag << 12 | (i + 1);
      if (pwrite(g_fd, &id, sizeof id, kIds + i * static_cast<off_t>(sizeof id)) == sizeof id) return id;
    }
  if (!g_by_pid) log(1, "no process id from %s (%s): processes are told apart by pid, within one PID namespace",
                     name.c_str(), g_fd < 0 ? std::strerror(errno) : "all taken");
  g_by_pid = true;
  return static_cast<int32_t>(getpid());
}

}  // namespace

int32_t process_id() {
  int32_t id = g_id.load(std::memory_order_acquire);
  if (id) return id;
  std::lock_guard<std::mutex> lock(g_mutex);
  id = g_id.load();
  if (id) return id;
  id = claim();
  g_id.store(id, std::memory_order_release);
  return id;
}

bool process_alive(int32_t id) {
  if (id <= 0) return false;
  if (id == process_id()) return true;
  if (g_by_pid) return kill(id, 0) == 0 || errno == EPERM;
  const off_t index = (id & 0xfff) - 1;
  struct flock byte {};
  byte.l_type = F_WRLCK;
  byte.l_whence = SEEK_SET;
  byte.l_start = index;
  byte.l_len = 1;
  if (index < 0 || fcntl(g_fd, F_OFD_GETLK, &byte) != 0 || byte.l_type == F_UNLCK) return false;
  int32_t holder = 0;
  return pread(g_fd, &holder, sizeof holder, kIds + index * static_cast<off_t>(sizeof holder)) == sizeof holder &&
         holder == id;
}

}  // namespace simgpu
