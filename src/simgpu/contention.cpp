// Kernels of all processes on one simulated GPU contend through a POSIX shared-memory
// segment. Default (timeslice, a GPU without MPS): one process runs kernels at a time; it
// keeps the GPU while it has queued kernels, and yields at the end of its time slice when
// another process waits. mps: processes run together; a kernel is slowed in proportion to
// the SM oversubscription at its start. Within a process, kernels of different streams
// overlap while SMs allow. No lock is held across processes: a dead owner is detected by
// pid and replaced, so a killed process never blocks the others.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "sim.h"

namespace simgpu {

namespace {

struct SharedGpu {
  std::atomic<uint32_t> magic;
  std::atomic<int32_t> owner_pid;         // timeslice: the process running kernels, 0 = none
  std::atomic<uint64_t> owner_since_ns;   // CLOCK_MONOTONIC is system-wide
  std::atomic<int32_t> waiters;           // processes waiting for the GPU
  std::atomic<int32_t> sm_used;           // mps: SMs occupied by running kernels
};

SharedGpu g_private;  // fallback when shared memory is unavailable: contention within the process only

SharedGpu* shared_gpu(int device) {
  static SharedGpu* segments[16];
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (segments[device]) return segments[device];
  std::string name = settings().shm_prefix + "-dev" + std::to_string(device);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  void* p = MAP_FAILED;
  if (fd >= 0) {
    if (ftruncate(fd, sizeof(SharedGpu)) == 0)
      p = mmap(nullptr, sizeof(SharedGpu), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
  }
  if (p == MAP_FAILED) {
    log(1, "shared memory %s unavailable (%s): no contention with other processes", name.c_str(),
        std::strerror(errno));
    segments[device] = &g_private;
  } else {
    segments[device] = static_cast<SharedGpu*>(p);  // zero-filled by ftruncate: a valid idle state
  }
  return segments[device];
}

bool alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

void sleep_until(uint64_t deadline_ns) {
  timespec ts{static_cast<time_t>(deadline_ns / 1000000000ull), static_cast<long>(deadline_ns % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void pause_briefly() {
  timespec ts{0, 50000};  // 50 µs
  nanosleep(&ts, nullptr);
}

// Process-local SM accounting: kernels of different streams overlap while SMs allow.
std::mutex g_local_mutex;
std::condition_variable g_local_cv;
int g_local_sms = 0;
std::atomic<int> g_local_running{0};
std::atomic<int> g_local_queued{0};  // kernels queued in this process and not yet run

void acquire_local_sms(unsigned sms) {
  std::unique_lock<std::mutex> lock(g_local_mutex);
  g_local_cv.wait(lock, [&] { return g_local_sms == 0 || g_local_sms + static_cast<int>(sms) <= settings().sms; });
  g_local_sms += static_cast<int>(sms);
}

void release_local_sms(unsigned sms) {
  std::lock_guard<std::mutex> lock(g_local_mutex);
  g_local_sms -= static_cast<int>(sms);
  g_local_cv.notify_all();
}

void acquire_timeslice(SharedGpu* gpu) {
  int32_t me = getpid();
  bool waiting = false;
  uint64_t last_liveness_check = 0;
  for (;;) {
    int32_t owner = gpu->owner_pid.load();
    if (owner == me) break;
    if (owner == 0) {
      if (gpu->owner_pid.compare_exchange_strong(owner, me)) {
        gpu->owner_since_ns.store(now_ns());
        break;
      }
      continue;
    }
    uint64_t t = now_ns();
    if (t - last_liveness_check > 1000000) {  // a killed owner must not hold the GPU forever
      last_liveness_check = t;
      if (!alive(owner) && gpu->owner_pid.compare_exchange_strong(owner, me)) {
        gpu->owner_since_ns.store(now_ns());
        break;
      }
    }
    if (!waiting) {
      gpu->waiters.fetch_add(1);
      waiting = true;
    }
    pause_briefly();
  }
  if (waiting) gpu->waiters.fetch_sub(1);
}

// After a kernel: give the GPU up when this process has nothing running, or when its time
// slice is over and another process waits.
void maybe_yield(SharedGpu* gpu) {
  int32_t me = getpid();
  if (gpu->owner_pid.load() != me) return;
  bool idle = g_local_running.load() == 0 && g_local_queued.load() == 0;
  bool slice_over = now_ns() - gpu->owner_since_ns.load() >= settings().timeslice_ns;
  if (idle || (slice_over && gpu->waiters.load() > 0)) {
    int32_t expected = me;
    gpu->owner_pid.compare_exchange_strong(expected, 0);
    if (!idle) pause_briefly();  // let a waiter take its turn
  }
}

}  // namespace

void kernel_queued() { g_local_queued.fetch_add(1); }

void run_on_gpu(int device, uint64_t duration_ns, unsigned sms) {
  SharedGpu* gpu = shared_gpu(device);
  acquire_local_sms(sms);
  g_local_running.fetch_add(1);
  if (settings().mps) {
    int32_t used = gpu->sm_used.fetch_add(static_cast<int32_t>(sms)) + static_cast<int32_t>(sms);
    double over = static_cast<double>(used) / settings().sms;
    uint64_t ns = over > 1.0 ? static_cast<uint64_t>(duration_ns * over) : duration_ns;
    sleep_until(now_ns() + ns);
    gpu->sm_used.fetch_sub(static_cast<int32_t>(sms));
  } else {
    acquire_timeslice(gpu);
    sleep_until(now_ns() + duration_ns);
  }
  g_local_running.fetch_sub(1);
  g_local_queued.fetch_sub(1);
  if (!settings().mps) maybe_yield(gpu);
  release_local_sms(sms);
}

}  // namespace simgpu
