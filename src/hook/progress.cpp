#include "progress.h"

#include <pthread.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "capture_state.h"
#include "collective_waits.h"
#include "counters.h"
#include "futex.h"
#include "gate.h"
#include "green_partitions.h"
#include "green_streams.h"
#include "job_ranks.h"
#include "kernel_cost.h"
#include "log.h"
#include "memory_quota.h"
#include "mps_share.h"
#include "online_requests.h"
#include "pool_backend.h"
#include "real_driver.h"
#include "settings.h"
#include "zico_gate.h"

namespace tandem::hook {

ProgressNotes g_notes;
std::atomic<uint32_t> g_role{TANDEM_ROLE_NONE};

namespace {

// ---- completion markers: a ring of events, recorded in order, completed in order ----
constexpr uint64_t kMarkers = 64;
struct Marker {
  CUevent event = nullptr;
  // The registration it was counted in (recorded). Its completion is counted there only: a
  // restarted daemon's new slot starts from zero, and a marker recorded for the old one but
  // seen complete after the re-registration would put the new slot's markers_completed ahead
  // of markers_recorded for good, hiding every pending marker from the bubble detector (and
  // its issued_ns, from the old slot's scale, would hide a filler's in-flight work). Old
  // mappings stay mapped (unlink_from_daemon), so a new slot never has an old one's address.
  tandem_slot* slot = nullptr;
  uint64_t issued_ns = 0;   // the slot's issued_ns when recorded: the work it covers
  uint64_t recorded_at = 0;
  bool nccl = false;  // behind an NCCL kernel: tells when the collective is over
  bool p2p = false;   // nccl, behind point-to-point kernels only (no collective since the last)
  uint64_t collectives = 0;  // nccl: the NCCL kernels issued when it was recorded
  // Not nccl: the collective its stream waits for (collective_waits.h); it is counted recorded
  // once that collective is over (0: counted when recorded).
  uint64_t behind = 0;
  // The page it was counted in: one recorded before tandemd restarted completes into nothing
  // (the new page's counters start again from zero; its issued_ns would look like a lie).
  const tandem_client_page* page = nullptr;
};
std::mutex g_marker_mutex;
Marker g_ring[kMarkers];
uint64_t g_head = 0, g_tail = 0;  // recorded, completed

std::atomic<bool> g_thread_started{false};

void sleep_ns(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

// At exit the driver tears its state down (in its exit handlers and library destructors), and
// this thread must not be inside it then. The thread's driver calls come in turns; an exit
// handler registered after cuInit (so run before the driver's) marks the process exiting and
// waits, at most 50 ms, for a turn under way to end. A turn begins only while the process is
// not exiting (both sides sequentially consistent: one of them sees the other).
std::atomic<bool> g_exiting{false};
std::atomic<bool> g_in_turn{false};

bool begin_turn() noexcept {
  g_in_turn.store(true);
  if (!g_exiting.load()) return true;
  g_in_turn.store(false);
  return false;
}

void end_turn() noexcept { g_in_turn.store(false); }

void stop_turns_at_exit() {
  g_exiting.store(true);
  const uint64_t deadline = monotonic_ns() + 50000000ull;
  while (g_in_turn.load() && monotonic_ns() < deadline) sleep_ns(100000);
}

bool try_record(CUstream s, bool per_thread, bool nccl = false) {
  tandem_client_page* page = current_slot() ? current_page() : nullptr;  // what this process writes
  if (!page || stream_is_capturing(s, per_thread)) return false;  // never touch a capturing stream
  Marker& m = g_ring[g_head % kMarkers];
  if (g_head - g_tail >= kMarkers) return false;  // the GPU is far behind: enough markers in flight
  if (!m.event && g_real.cuEventCreate(&m.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
  // The flag is cleared before the record, not after: a launch that sets it meanwhile (another
  // thread, whose own marker was skipped because this one held the lock) keeps it set, so the
  // next tick covers that launch. Cleared after, such a launch was never covered and its work
  // looked in flight for good (a gated launch then waited until its gate opened).
  std::atomic<bool>& pending = nccl ? g_notes.nccl_since_marker : g_notes.work_since_marker;
  pending.store(false, std::memory_order_seq_cst);
  // Likewise whether a collective is behind it (a collective launched meanwhile sets it again:
  // the next NCCL marker is a collective's).
  const bool collective = nccl && g_notes.collective_since_marker.exchange(false, std::memory_order_seq_cst);
  CUresult r = per_thread ? g_real.cuEventRecord_ptsz(m.event, s) : g_real.cuEventRecord(m.event, s);
  if (r != CUDA_SUCCESS) {
    pending.store(true, std::memory_order_relaxed);
    if (collective) g_notes.collective_since_marker.store(true, std::memory_order_relaxed);
    return false;
  }
  m.issued_ns = __atomic_load_n(&page->issued_ns, __ATOMIC_RELAXED);
  m.recorded_at = monotonic_ns();
  m.nccl = nccl;
  m.p2p = nccl && !collective;
  m.collectives = nccl ? collectives_issued() : 0;
  m.behind = nccl ? 0 : collective_ahead_of(s, per_thread);
  m.page = page;
  ++g_head;
  // A point-to-point marker is counted as one after it is counted an NCCL marker, and stops
  // being one before it stops being an NCCL marker: tandemd, between the two, sees a collective
  // in flight (as before point-to-point was told apart), never the other way round.
  if (nccl)
    __atomic_fetch_add(&page->nccl_markers_recorded, 1, __ATOMIC_RELEASE);
  else if (!m.behind)
    __atomic_fetch_add(&page->markers_recorded, 1, __ATOMIC_RELEASE);
  if (m.p2p) __atomic_fetch_add(&page->p2p_markers_recorded, 1, __ATOMIC_RELEASE);
  return true;
}

// A marker queued behind a collective counts as work on the GPU from when the collective is
// over (or, at the latest, when it passes itself).
void count_queued_marker(Marker& m, tandem_client_page* page) {
  if (!m.behind) return;
  m.behind = 0;
  if (m.page == page) __atomic_fetch_add(&page->markers_recorded, 1, __ATOMIC_RELEASE);
}

// A marker behind the last launch on `s`, from the progress thread. Another thread's
// per-thread default stream cannot be named from here: the next launch to such a stream
// records it (record_marker_if_wanted), and a gated launch waiting for its in-flight work
// records one itself (completion_in_sight).
void record_from_progress_thread(CUstream s, bool per_thread, bool nccl) {
  if (thread_own_stream(s, per_thread)) {
    if (!nccl) g_notes.own_stream_marker_wanted.store(true, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(g_marker_mutex);
  try_record(s, per_thread, nccl);
}

// Completed markers advance the slot's progress. With g_marker_mutex held.
void poll_markers_locked(uint64_t now) {
  const tandem_slot* daemon_slot = current_slot();
  tandem_client_page* page = daemon_slot ? current_page() : nullptr;  // what this process writes
  bool progressed = false;
  while (g_tail < g_head) {
    Marker& m = g_ring[g_tail % kMarkers];
    CUresult q = g_real.cuEventQuery(m.event);
    if (q == CUDA_ERROR_NOT_READY) break;
    ++g_tail;
    if (!page || m.page != page) continue;
    if (m.nccl) {
      if (m.p2p) __atomic_fetch_add(&page->p2p_markers_completed, 1, __ATOMIC_RELEASE);
      __atomic_fetch_add(&page->nccl_markers_completed, 1, __ATOMIC_RELEASE);
      collectives_over_through(m.collectives);
    } else {
      count_queued_marker(m, page);
      __atomic_store_n(&page->completed_ns, m.issued_ns, __ATOMIC_RELEASE);
      __atomic_store_n(&page->last_completion_ns, now, __ATOMIC_RELEASE);
      __atomic_fetch_add(&page->markers_completed, 1, __ATOMIC_RELEASE);
      progressed = true;
    }
  }
  // The launches and the markers still pending that waited for a collective now over.
  const uint64_t over = collectives_over();
  for (uint64_t i = g_tail; page && i < g_head; ++i)
    if (Marker& m = g_ring[i % kMarkers]; m.behind && m.behind <= over) count_queued_marker(m, page);
  if (uint64_t launches = page ? take_launches_no_longer_queued() : 0)
    __atomic_fetch_add(&page->launches, launches, __ATOMIC_RELAXED);
  // A launch of this process may be waiting for its in-flight work to drop (policy slo, or a
  // filler's bound with no training job).
  if (progressed && __atomic_load_n(&daemon_slot->inflight_bound_ns, __ATOMIC_ACQUIRE))
    futex_bump_and_wake(&page->progress_wake);
}

void* progress_main(void*) {
  prctl(PR_SET_NAME, "tandem-progress", 0, 0, 0);
  // This thread's driver calls must never disturb an application's stream capture.
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  const uint64_t period = setting_ns(SettingId::TANDEM_SAMPLE_US);
  const uint64_t tick = period / 4 ? period / 4 : 1000;
  // Wait for the first launch to publish the application's context.
  CUcontext ctx = nullptr;
  // At most 10 ms apart whatever the period: the memory pool waits (bounded) for the first link.
  while (!(ctx = g_notes.context.load(std::memory_order_acquire))) sleep_ns(std::min<uint64_t>(period, 10000000));
  static std::atomic<bool> exit_handler{false};  // once a process (a forked child inherits it)
  if (!exit_handler.exchange(true)) atexit(stop_turns_at_exit);  // the context exists: cuInit has run
  if (!begin_turn()) return nullptr;
  g_real.cuCtxSetCurrent(ctx);
  g_real.cuThreadExchangeStreamCaptureMode(&relaxed);
  prepare_green_partitions();  // training: its live SM partitions, where the driver has green contexts
  unsigned char uuid[16] = {};
  CUdevice dev = 0;
  CUuuid u{};
  size_t total = 0;
  if (g_real.cuCtxGetDevice(&dev) == CUDA_SUCCESS && g_real.cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS)
    std::memcpy(uuid, u.bytes, sizeof uuid);
  g_real.cuDeviceTotalMem_v2(&total, dev);
  uint64_t next_link_attempt = 0;
  end_turn();
  for (;;) {
    if (!begin_turn()) return nullptr;
    uint64_t now = monotonic_ns();
    if (!current_slot()) {
      if (now >= next_link_attempt) {
        link_to_daemon(uuid, total);
        next_link_attempt = now + 1000000000ull;  // one attempt a second while there is no daemon
      }
    } else if (!daemon_connected()) {
      unlink_from_daemon();
      next_link_attempt = now + 100000000ull;
    }
    // Read before this turn's look at the quota (and after a link made in this turn): a change
    // made from here on ends the sleep below.
    const tandem_slot* woken_by = current_slot();
    uint32_t memory_seen = woken_by ? __atomic_load_n(&woken_by->memory_wake, __ATOMIC_ACQUIRE) : 0;
    if (tandem_client_page* page = current_slot() ? current_page() : nullptr) {
      __atomic_store_n(&page->heartbeat_ns, now, __ATOMIC_RELEASE);
      const MemoryCounters& mem = memory_counters();
      __atomic_store_n(&page->peak_bytes, mem.peak_bytes.load(std::memory_order_relaxed), __ATOMIC_RELAXED);
      __atomic_store_n(&page->bytes_in_use, mem.bytes_in_use.load(std::memory_order_relaxed), __ATOMIC_RELAXED);
      __atomic_store_n(&page->quota_refusals, mem.quota_refusals.load(std::memory_order_relaxed), __ATOMIC_RELAXED);
      __atomic_store_n(&page->quota_bytes, memory_quota(), __ATOMIC_RELAXED);
      publish_sm_share(page);
      __atomic_store_n(&page->training_flags,
                       (g_job_local || g_job_grouped ? TANDEM_TRAINING_COLLECTIVES_HELD : 0u) | green_training_flags(),
                       __ATOMIC_RELAXED);
      // Also those counted before the registration (the launch publishes the rest at once).
      publish_collectives(page, g_collectives_launched.load(std::memory_order_relaxed));
      memory_pressure_tick(now);
      __atomic_store_n(&page->working_set_bytes, pool_working_set(now), __ATOMIC_RELAXED);
      __atomic_store_n(&page->memory_elastic, memory_pressure_registered() ? 1u : 0u, __ATOMIC_RELAXED);
      pool_tick();
      zico_progress_tick();
      if (g_role == TANDEM_ROLE_INFERENCE) publish_request_latency();
      if (g_notes.work_since_marker.load(std::memory_order_relaxed) &&
          !g_notes.last_was_nccl.load(std::memory_order_relaxed))
        record_from_progress_thread(g_notes.last_stream.load(std::memory_order_relaxed),
                                    g_notes.last_per_thread.load(std::memory_order_relaxed), false);
      // Behind the collective too: the daemon may hold fillers back until it is over.
      if (g_notes.nccl_since_marker.load(std::memory_order_relaxed))
        record_from_progress_thread(g_notes.nccl_stream.load(std::memory_order_relaxed),
                                    g_notes.nccl_per_thread.load(std::memory_order_relaxed), true);
      poll_cost_samples();
      std::lock_guard<std::mutex> lock(g_marker_mutex);
      poll_markers_locked(now);
    } else {
      pool_tick();  // without tandemd too: TANDEM_MEM_LIMIT bounds the chunks held (pool_backend.cpp)
    }
    end_turn();
    // tandemd wakes this thread when it changes the quota (memory wanted back at once).
    if (woken_by && woken_by == current_slot()) {
      futex_wait(&woken_by->memory_wake, memory_seen, tick);
    } else {
      sleep_ns(tick);
    }
  }
  return nullptr;
}

}  // namespace

void record_marker_now(CUstream s, bool per_thread) noexcept {
  std::unique_lock<std::mutex> lock(g_marker_mutex, std::try_to_lock);
  if (lock.owns_lock()) try_record(s, per_thread);
}

void record_wanted_marker(CUstream s, bool per_thread) noexcept {
  if (g_notes.own_stream_marker_wanted.exchange(false, std::memory_order_relaxed)) record_marker_now(s, per_thread);
}

bool completion_in_sight(CUstream s, bool per_thread) noexcept {
  std::unique_lock<std::mutex> lock(g_marker_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return true;  // the progress thread is recording or polling them now
  const tandem_client_page* page = current_slot() ? current_page() : nullptr;
  for (uint64_t i = g_tail; i < g_head; ++i)
    if (const Marker& m = g_ring[i % kMarkers]; !m.nccl && m.page == page) return true;
  RelaxedCaptureScope relaxed;
  return try_record(green_op_stream(s, per_thread), per_thread);
}

void record_marker_before_collective(CUstream s, bool per_thread) noexcept {
  std::lock_guard<std::mutex> lock(g_marker_mutex);
  try_record(s, per_thread);
}

void record_marker_behind_collective(CUstream s, bool per_thread) noexcept {
  if (!g_notes.nccl_since_marker.load(std::memory_order_relaxed)) return;  // one is there already
  std::lock_guard<std::mutex> lock(g_marker_mutex);
  try_record(s, per_thread, true);
}

void poll_markers_now() noexcept {
  std::unique_lock<std::mutex> lock(g_marker_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  RelaxedCaptureScope relaxed(true);  // event queries, in the application's thread (a gate wait)
  poll_markers_locked(monotonic_ns());
}

void start_progress_thread() noexcept {
  if (g_role == TANDEM_ROLE_NONE || g_thread_started.exchange(true)) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  if (pthread_create(&thread, &attr, progress_main, nullptr) != 0) {
    TANDEM_LOG_WARN("cannot start the progress thread; running unmanaged");
    g_thread_started.store(false);
  }
  pthread_attr_destroy(&attr);
}

void progress_after_fork_child() noexcept {
  // The parent's thread, events and registration do not exist here.
  new (&g_marker_mutex) std::mutex();
  for (Marker& m : g_ring) m = Marker{};
  g_head = g_tail = 0;
  cost_samples_after_fork_child();
  collective_waits_after_fork_child();
  g_notes.context.store(nullptr);
  g_notes.work_since_marker.store(false);
  g_notes.nccl_since_marker.store(false);
  g_notes.collective_since_marker.store(false);
  g_notes.own_stream_marker_wanted.store(false);
  g_thread_started.store(false);
  g_in_turn.store(false);  // the parent's thread may have been in a turn at the fork
}

}  // namespace tandem::hook
