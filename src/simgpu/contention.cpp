// Kernels of all processes on one simulated GPU contend through a POSIX shared-memory segment
// (/simgpu-<uid>-dev<N>-v3, prefix SIMGPU_SHM).
//  * timeslice (default; a GPU without MPS): one process runs kernels at a time. The owner
//    keeps the GPU while no other process waits; when one waits, ownership passes at the end
//    of each time slice (SIMGPU_TIMESLICE_US), also in the middle of a kernel: a kernel's work
//    advances only while its process owns the GPU, as with the hardware's time-sliced
//    preemption. Two processes each running a 10 ms kernel therefore both take ~20 ms. Each
//    time the GPU passes to another process, that process first pays a context switch
//    (SIMGPU_CONTEXT_SWITCH_US) while owning the GPU.
//  * mps: processes run together; a kernel advances at min(1, SMs / SMs in use), so each
//    slows in proportion to the oversubscription while it lasts. Blocks are placed on SMs in
//    the order kernels reach the GPU (the "left-over" policy of the hardware's block
//    scheduler): a kernel of another process starts only once the kernels that came before it
//    have placed all their blocks (their last wave has begun), unless they leave SMs free. A
//    request's small kernels beside a training step's many-wave kernels therefore wait for
//    each of them, as on an H200 under MPS, where such a request took 6.5 x its time alone
//    (docs/simgpu.md); SM limits (an active thread percentage, an affinity) leave SMs free.
//    A client's priority (CUDA_MPS_CLIENT_PRIORITY: 0 normal, 1 below normal; MPS maps a
//    below-normal client's streams under every normal client's) orders the placing first:
//    a kernel waits only for kernels of its own priority that came before it and for those
//    of a higher one, and a lower-priority kernel still placing blocks stops placing (its
//    progress pauses) while higher-priority kernels fill the SMs.
// Within a process, kernels of different streams overlap while SMs allow (min(grid, SMs)).
// No lock is held across processes: every process has a slot (its id, SMs in use, waiting)
// that a dead process's successor reclaims, and a dead owner is replaced (ids and liveness
// across PID namespaces: process_identity.cpp).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "sim.h"

namespace simgpu {

namespace {

constexpr uint32_t kMagic = 0x53475055;  // "SGPU"
constexpr int kSlots = 128;
constexpr int kMaxDevices = 16;

struct Slot {
  std::atomic<int32_t> pid;
  std::atomic<int32_t> sms;      // SMs occupied by this process's running kernels (mps)
  std::atomic<int32_t> waiting;  // kernels of this process waiting for the GPU (timeslice)
  std::atomic<int32_t> priority; // mps: the client's priority, 0 normal, 1 below normal
  // mps: the earliest ticket (arrival order on the GPU) of this process's kernels still placing
  // blocks or waiting to, 0 when none; and the SMs those kernels take.
  std::atomic<uint64_t> first_placing;
  std::atomic<int32_t> placing_sms;
  // timeslice: this process's kernels running on the GPU (not those queued behind an event or
  // waiting for NCCL peers), and when that count last fell to 0.
  std::atomic<int32_t> running;
  std::atomic<uint64_t> idle_since_ns;
};

struct SharedGpu {
  std::atomic<uint32_t> magic;
  std::atomic<int32_t> owner_pid;        // timeslice: the process running kernels, 0 = none
  std::atomic<uint64_t> owner_since_ns;  // start of the owner's slice (CLOCK_MONOTONIC is system-wide)
  std::atomic<int32_t> yielded_by;       // the last owner that gave the GPU up for a waiter
  std::atomic<int32_t> last_ran;         // the process whose context the GPU holds (switch cost)
  std::atomic<uint64_t> tickets;         // mps: kernels that have reached the GPU, for their order
  Slot slots[kSlots];
};

SharedGpu g_private[kMaxDevices];  // fallback when shared memory is unavailable

bool alive(int32_t pid) { return process_alive(pid); }  // a process id of process_identity.cpp

// Lock-free once mapped. A stream worker may be mapping when the process forks: the child then
// gets the mutex unlocked (ProcessMutex) and maps the segment itself.
std::atomic<SharedGpu*> g_segments[kMaxDevices];
ProcessMutex g_segments_mutex;

SharedGpu* shared_gpu(int device) {
  std::atomic<SharedGpu*>* segments = g_segments;
  if (SharedGpu* mapped = segments[device].load(std::memory_order_acquire)) return mapped;
  std::lock_guard<std::mutex> lock(g_segments_mutex);
  if (SharedGpu* mapped = segments[device].load()) return mapped;
  // The layout's version in the name: a segment an older build left behind is not misread.
  std::string name = settings().shm_prefix + "-dev" + std::to_string(device) + "-v3";
  auto* gpu = static_cast<SharedGpu*>(map_shared_segment(name, sizeof(SharedGpu), kMagic));
  if (!gpu) {
    log(1, "shared memory %s unavailable or of an unknown layout: no contention with other processes", name.c_str());
    gpu = &g_private[device];
  }
  segments[device].store(gpu, std::memory_order_release);
  return gpu;
}

// A process's slot, or nullptr when it has none.
Slot* slot_of(SharedGpu* gpu, int32_t pid) {
  for (Slot& s : gpu->slots)
    if (s.pid.load() == pid) return &s;
  return nullptr;
}

// This process's slot: found by pid, or claimed from a free or dead process's slot.
Slot* my_slot(SharedGpu* gpu) {
  int32_t me = process_id();
  if (Slot* mine = slot_of(gpu, me)) return mine;
  for (Slot& s : gpu->slots) {
    int32_t pid = s.pid.load();
    if ((pid == 0 || !alive(pid)) && s.pid.compare_exchange_strong(pid, me)) {
      s.sms.store(0);
      s.waiting.store(0);
      s.first_placing.store(0);
      s.placing_sms.store(0);
      s.running.store(0);
      s.idle_since_ns.store(0);
      s.priority.store(mps_client_priority());
      return &s;
    }
  }
  return nullptr;  // more than kSlots live processes: this one is not seen by the others
}

bool others_waiting(SharedGpu* gpu, int32_t me) {
  for (Slot& s : gpu->slots)
    if (s.waiting.load() > 0 && s.pid.load() != me && alive(s.pid.load())) return true;
  return false;
}

int32_t sms_in_use(SharedGpu* gpu) {
  int32_t total = 0;
  for (Slot& s : gpu->slots) {
    int32_t n = s.sms.load();
    if (n <= 0) continue;
    int32_t pid = s.pid.load();
    if (alive(pid)) total += n;
    else if (s.pid.compare_exchange_strong(pid, 0)) s.sms.store(0);  // reclaim a killed process's SMs
  }
  return total;
}

// mps: the SMs that other processes' kernels placed ahead of this process's kernel `ticket`
// take while they place their blocks: those of a higher priority, and those of the same
// priority that reached the GPU before it (`ticket` 0: only those of a higher priority). A
// killed process's are skipped; its slot is reclaimed by the next process to claim it.
int32_t sms_placed_ahead(SharedGpu* gpu, const Slot* mine, uint64_t ticket) {
  int32_t total = 0, mine_priority = mine->priority.load();
  for (Slot& s : gpu->slots) {
    uint64_t first = s.first_placing.load();
    if (&s == mine || first == 0) continue;
    int32_t priority = s.priority.load();
    bool ahead = priority < mine_priority || (priority == mine_priority && first < ticket);
    if (ahead && alive(s.pid.load())) total += s.placing_sms.load();
  }
  return total;
}

void sleep_until(uint64_t deadline_ns) { sleep_until_ns(deadline_ns); }  // transfers.cpp

void pause_briefly() { sleep_until(now_ns() + 50000); }  // 50 µs: the polling period of waiters

// Process-local SM accounting per device: kernels of different streams overlap while SMs allow.
struct LocalGpu {
  std::mutex m;
  std::condition_variable cv;
  int sms = 0;
  std::atomic<int> queued{0};  // kernels queued and not yet finished
  std::vector<std::pair<uint64_t, int>> placing;  // mps: (ticket, SMs) of kernels placing blocks
};
LocalGpu g_local[kMaxDevices];

// Timeslice: whether the owner has had no kernel running for kOwnerIdleNs although it has
// kernels queued (it gives the GPU up at its last unfinished kernel's end, not before): all of
// them wait, behind an event on another stream or for NCCL peers. The hardware's scheduler
// switches out a context whose channels are all blocked in a semaphore acquire, so a waiter
// may take the GPU. Without this a pipeline stage whose backward kernels were queued behind
// the receive of their gradients kept the GPU through the 20 ms wait, and the filler beside it
// ran only in the slices it took from the stage's next kernels. The grace covers the gap
// between two kernels of one stream (a worker thread's wake-up on a loaded host).
constexpr uint64_t kOwnerIdleNs = 200000;
bool owner_idle(SharedGpu* gpu, int32_t owner, uint64_t now) {
  Slot* s = slot_of(gpu, owner);
  if (!s) return false;
  uint64_t since = s->idle_since_ns.load();
  return s->running.load() == 0 && since != 0 && now > since + kOwnerIdleNs;
}

// Timeslice: waits until this process owns the GPU. A process that just yielded for a waiter
// lets the waiter take over before competing again.
void acquire_ownership(SharedGpu* gpu, Slot* slot) {
  int32_t me = process_id();
  if (gpu->owner_pid.load() == me) return;
  if (slot) slot->waiting.fetch_add(1);
  uint64_t last_check = 0, yielded_at = now_ns();
  for (;;) {
    int32_t owner = gpu->owner_pid.load();
    if (owner == me) break;
    bool defer = gpu->yielded_by.load() == me && now_ns() - yielded_at < settings().timeslice_ns &&
                 others_waiting(gpu, me);
    if (owner == 0 && !defer) {
      if (gpu->owner_pid.compare_exchange_strong(owner, me)) {
        gpu->owner_since_ns.store(now_ns());
        break;
      }
      continue;
    }
    uint64_t t = now_ns();
    if (owner != 0 && !defer && owner_idle(gpu, owner, t) && gpu->owner_pid.compare_exchange_strong(owner, me)) {
      gpu->owner_since_ns.store(now_ns());
      break;
    }
    if (owner != 0 && t - last_check > 1000000) {  // a killed owner must not hold the GPU forever
      last_check = t;
      if (!alive(owner) && gpu->owner_pid.compare_exchange_strong(owner, me)) {
        gpu->owner_since_ns.store(now_ns());
        break;
      }
    }
    pause_briefly();
  }
  if (slot) slot->waiting.fetch_sub(1);
}

// Timeslice: the GPU passes to this process, which pays the context switch (the previous
// process's state saved, this one's loaded: SIMGPU_CONTEXT_SWITCH_US) when another process's
// context was the last to run. Returns that cost: the GPU does nothing useful meanwhile, and
// this process's slice starts once its context is loaded.
uint64_t context_switch_ns(SharedGpu* gpu) {
  int32_t me = process_id();
  int32_t previous = gpu->last_ran.exchange(me);
  uint64_t cost = settings().context_switch_ns;
  if (previous == me || previous == 0 || cost == 0) return 0;
  gpu->owner_since_ns.store(now_ns() + cost);
  return cost;
}

void release_ownership(SharedGpu* gpu, bool for_waiter) {
  int32_t me = process_id();
  if (for_waiter) gpu->yielded_by.store(me);
  int32_t expected = me;
  gpu->owner_pid.compare_exchange_strong(expected, 0);
}

void run_timeslice(SharedGpu* gpu, Slot* slot, uint64_t work_ns) {
  int32_t me = process_id();
  uint64_t done = 0;
  while (done < work_ns) {
    acquire_ownership(gpu, slot);
    // The switch is slept with the work (one wake-up less: each costs a loaded CPU ~0.1 ms).
    uint64_t switching = context_switch_ns(gpu);
    uint64_t start = now_ns() + switching;
    uint64_t slice_end = gpu->owner_since_ns.load() + settings().timeslice_ns;
    uint64_t end = start + (work_ns - done);
    bool contended = others_waiting(gpu, me);
    if (contended && slice_end < end) end = slice_end > start ? slice_end : start;
    else if (!contended && slice_end < end) end = std::min(end, start + settings().timeslice_ns);  // look again then
    sleep_until(end);
    uint64_t woke = now_ns();
    done += woke > start ? woke - start : 0;  // progress is the time actually owned: oversleeping is not lost
    if (done < work_ns && gpu->owner_pid.load() == me && now_ns() >= slice_end) {
      if (others_waiting(gpu, me)) {
        release_ownership(gpu, true);
      } else {
        gpu->owner_since_ns.store(now_ns());  // nobody waits: a new slice
      }
    }
  }
}

// A kernel has finished: the GPU is given up when it was the process's last unfinished kernel
// (`last`), else kept for the others while its slice lasts.
void end_of_kernel(SharedGpu* gpu, bool last) {
  int32_t me = process_id();
  if (last) release_ownership(gpu, others_waiting(gpu, me));
  else if (now_ns() - gpu->owner_since_ns.load() >= settings().timeslice_ns && others_waiting(gpu, me))
    release_ownership(gpu, true);
}

// mps: what the slot tells other processes of this process's kernels that place blocks.
void publish_placing(LocalGpu& local, Slot* slot) {
  uint64_t first = 0;
  int sms = 0;
  for (auto& [ticket, n] : local.placing) {
    if (first == 0 || ticket < first) first = ticket;
    sms += n;
  }
  slot->placing_sms.store(sms);
  slot->first_placing.store(first);
}

void start_placing(LocalGpu& local, Slot* slot, uint64_t ticket, unsigned sms) {
  std::lock_guard<std::mutex> lock(local.m);
  local.placing.emplace_back(ticket, static_cast<int>(sms));
  publish_placing(local, slot);
}

void end_placing(LocalGpu& local, Slot* slot, uint64_t ticket) {
  std::lock_guard<std::mutex> lock(local.m);
  std::erase_if(local.placing, [&](const auto& p) { return p.first == ticket; });
  publish_placing(local, slot);
}

// A kernel of `waves` waves of blocks: it waits its turn (the kernels that reached the GPU
// before it place their blocks first, unless they leave SMs free), places blocks until its
// last wave begins, and advances at the rate the SMs in use allow.
void run_mps(SharedGpu* gpu, LocalGpu& local, Slot* slot, unsigned sms, uint64_t work_ns, unsigned waves) {
  uint64_t ticket = 0;
  if (slot) {
    ticket = gpu->tickets.fetch_add(1) + 1;
    start_placing(local, slot, ticket, sms);
    while (sms_placed_ahead(gpu, slot, ticket) >= settings().sms) pause_briefly();
  }
  // Its blocks are all placed once the work of all waves but the last is done.
  double placed_at = waves > 1 ? static_cast<double>(work_ns) * (waves - 1) / waves : 0;
  if (ticket && placed_at == 0) end_placing(local, slot, std::exchange(ticket, 0));
  if (slot) slot->sms.fetch_add(static_cast<int32_t>(sms));
  double done = 0;
  while (done < static_cast<double>(work_ns)) {
    if (ticket && sms_placed_ahead(gpu, slot, 0) >= settings().sms) {
      // Higher-priority kernels take every SM that frees: no block of this one is placed, and
      // its SMs are theirs until they have placed their own.
      slot->sms.fetch_sub(static_cast<int32_t>(sms));
      while (sms_placed_ahead(gpu, slot, 0) >= settings().sms) pause_briefly();
      slot->sms.fetch_add(static_cast<int32_t>(sms));
    }
    int32_t used = std::max<int32_t>(sms_in_use(gpu), 1);
    double rate = used > settings().sms ? static_cast<double>(settings().sms) / used : 1.0;
    uint64_t start = now_ns();
    double until = ticket ? placed_at : static_cast<double>(work_ns);
    uint64_t wall = static_cast<uint64_t>((until - done) / rate);
    sleep_until(start + std::min<uint64_t>(wall, 1000000));  // rates change: look again every ms
    done += static_cast<double>(now_ns() - start) * rate;
    if (ticket && done >= placed_at) end_placing(local, slot, std::exchange(ticket, 0));
  }
  if (slot) slot->sms.fetch_sub(static_cast<int32_t>(sms));
  if (ticket) end_placing(local, slot, ticket);
}

}  // namespace

// Launches name the ordinal the process sees; contention is per physical GPU
// (CUDA_VISIBLE_DEVICES may show one GPU to two processes under different ordinals).
static int physical_index(int ordinal) {
  int p = physical_device(ordinal);
  return p >= 0 && p < kMaxDevices ? p : 0;
}

void kernel_queued(int device) { g_local[physical_index(device)].queued.fetch_add(1); }

void run_on_gpu(int device, uint64_t duration_ns, unsigned sms, unsigned waves) {
  device = physical_index(device);
  SharedGpu* gpu = shared_gpu(device);
  Slot* slot = my_slot(gpu);
  LocalGpu& local = g_local[device];
  {
    std::unique_lock<std::mutex> lock(local.m);
    local.cv.wait(lock, [&] { return local.sms == 0 || local.sms + static_cast<int>(sms) <= settings().sms; });
    local.sms += static_cast<int>(sms);
  }
  if (settings().mps) {
    run_mps(gpu, local, slot, sms, duration_ns, waves);
  } else {
    if (slot) slot->running.fetch_add(1);
    run_timeslice(gpu, slot, duration_ns);
    if (slot && slot->running.fetch_sub(1) == 1) slot->idle_since_ns.store(now_ns());
  }
  // Which kernel is the last is decided by the one decrement that reaches zero. Decided from
  // loads of the counts (the count, then the decrement), two kernels of different streams
  // finishing together each saw the other unfinished and both kept the GPU: it stayed owned by
  // a process with nothing to run, and every other process's kernels waited until that one
  // launched again; forever when it was a filler held back until training's work completed.
  bool last = local.queued.fetch_sub(1) == 1;
  if (!settings().mps) end_of_kernel(gpu, last);
  {
    std::lock_guard<std::mutex> lock(local.m);
    local.sms -= static_cast<int>(sms);
    local.cv.notify_all();
  }
}

// fork(): the child is a new process on the GPU; its counters start empty.
void contention_after_fork_child() {
  for (LocalGpu& l : g_local) {
    new (&l.m) std::mutex();
    new (&l.cv) std::condition_variable();
    l.sms = 0;
    l.queued.store(0);
    new (&l.placing) std::vector<std::pair<uint64_t, int>>();  // the parent's kernels are not the child's
  }
}

}  // namespace simgpu
