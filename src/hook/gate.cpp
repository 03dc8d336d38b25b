#include "gate.h"

#include <time.h>

#include <algorithm>

#include "counters.h"
#include "futex.h"
#include "log.h"
#include "memory_quota.h"
#include "progress.h"
#include "settings.h"

namespace tandem::hook {

bool g_job_local = false;

// An online inference request is running that holds the gated. Policy slo: tandemd publishes
// a slot's requests_open only while its requests may hold (within the floor), and a busy
// server's requests hold nothing (requests_unheld: tandemd lets training run beside them,
// bounded). Policy fill: every open request is published and a batch filler yields to it
// (online before offline); training's gate is closed only while requests may hold it
// (TANDEM_FILL_ONLINE_HOLD), and requests_unheld speaks to the requests' admission alone.
// Only active inference slots count, and a request open for more than 4 times its target is
// taken for a stuck client and ignored.
bool online_request_open(const tandem_shm_header* shm, uint64_t now) noexcept {
  if (__atomic_load_n(&shm->policy, __ATOMIC_RELAXED) == TANDEM_POLICY_SLO &&
      __atomic_load_n(&shm->requests_unheld, __ATOMIC_ACQUIRE))
    return false;
  uint64_t mask = __atomic_load_n(&shm->inference_slots, __ATOMIC_ACQUIRE);
  for (; mask; mask &= mask - 1) {
    const tandem_slot& s = shm->slots[__builtin_ctzll(mask)];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE || s.role != TANDEM_ROLE_INFERENCE) continue;
    if (__atomic_load_n(&s.requests_open, __ATOMIC_ACQUIRE) == 0) continue;
    uint64_t since = __atomic_load_n(&s.request_activity_ns, __ATOMIC_ACQUIRE);
    uint64_t stuck_after = 4000ull * __atomic_load_n(&s.slo_us, __ATOMIC_RELAXED);
    if (now < since + stuck_after) return true;
  }
  return false;
}

namespace {
// Tokens left: the daemon's limit minus what this process spent.
int64_t balance(const tandem_slot* slot, const tandem_client_page* page) noexcept {
  return static_cast<int64_t>(__atomic_load_n(&slot->token_limit_ns, __ATOMIC_ACQUIRE) -
                              __atomic_load_n(&page->tokens_taken_ns, __ATOMIC_ACQUIRE));
}
}  // namespace

// A filler pays for a launch in full before it starts: the balance must cover its cost, so a
// long kernel cannot start on the last microseconds of a bubble's tokens. Training gated under
// policy slo starts a kernel on any positive balance (its kernels may be longer than the whole
// in-flight window; the window, not the balance, protects the request).
bool pays_in_full() noexcept { return g_role == TANDEM_ROLE_BATCH_INFERENCE; }

// What tandemd sees of a launch waiting at the gate (page->gate_want_us): its cost, so that a
// launch longer than the filler's share can be granted whole, and status can say why it waits.
void publish_want(tandem_client_page* page, uint64_t cost_ns) noexcept {
  uint64_t us = cost_ns / 1000 + 1;
  __atomic_store_n(&page->gate_want_us, us > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(us), __ATOMIC_RELAXED);
}

const tandem_slot* slot_after_first_link() noexcept {
  const uint64_t deadline = monotonic_ns() + setting_ns(SettingId::TANDEM_FAIL_OPEN_MS);
  while (g_link_attempts.load(std::memory_order_acquire) == 0 && monotonic_ns() < deadline) {
    timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  return current_slot();
}

namespace {
// Since when this process's in-flight estimate has stood above its completions with no marker
// pending that could lower it (0: it has one). Process-wide: once a wait has failed open on
// it, the next waits do at once until a marker is pending again.
std::atomic<uint64_t> g_uncovered_since{0};
std::atomic<bool> g_uncovered_logged{false};

// True when the wait must end because the in-flight estimate cannot fall: work is counted in
// flight, no marker stands behind it, none could be recorded, for TANDEM_FAIL_OPEN_MS. A marker
// is recorded behind `s` (this thread's own stream) when none is pending: the progress thread
// cannot name another thread's per-thread default stream.
bool estimate_stuck(tandem_client_page* page, CUstream s, bool per_thread, uint64_t now, uint64_t bound_ns) noexcept {
  if (!queue_over(page, 1) || completion_in_sight(s, per_thread)) {
    g_uncovered_since.store(0, std::memory_order_relaxed);
    return false;
  }
  uint64_t since = g_uncovered_since.load(std::memory_order_relaxed);
  if (!since) g_uncovered_since.compare_exchange_strong(since, now, std::memory_order_relaxed);
  if (since && now - since >= bound_ns) {
    if (!g_uncovered_logged.exchange(true))
      TANDEM_LOG_WARN("launches waited {} ms for in-flight work that no completion marker covers; failing open "
                      "(tandemctl status: inflight_fail_opens)", bound_ns / 1000000);
    return true;
  }
  return false;
}
}  // namespace

void gate_wait(const tandem_slot* slot, tandem_client_page* page, uint64_t cost_ns, CUstream s, bool per_thread) noexcept {
  const uint64_t period_ns = setting_ns(SettingId::TANDEM_SAMPLE_US);
  const uint64_t stale_ns = setting_ns(SettingId::TANDEM_FAIL_OPEN_MS);
  const tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  const int64_t need = pays_in_full() ? std::max<int64_t>(static_cast<int64_t>(cost_ns), 1) : 1;
  const uint64_t fail_open_bound_ns = 4 * setting_ns(SettingId::TANDEM_MAX_INFLIGHT_US);
  uint64_t start = 0;
  for (;;) {
    uint32_t request_seq = shm ? __atomic_load_n(&shm->request_seq, __ATOMIC_ACQUIRE) : 0;
    bool open = __atomic_load_n(&slot->gate, __ATOMIC_ACQUIRE) == TANDEM_GATE_OPEN;
    uint64_t now = monotonic_ns();
    if (!open && !pays_in_full() && memory_owed()) {
      // tandemd wants memory this training process holds live, and the program frees it at its
      // next safe point (its memory-pressure callback told it: discard the running batch), which
      // a held launch keeps it from reaching: the handover, and the request waiting for it,
      // would wait for the hold (up to TANDEM_MEM_HANDOVER_MS). Let it go on until it has given
      // the memory back (SIRIUS's instant adjustment needs the program to run).
      count(gate_counters().memory_owed_passes);
      break;
    }
    // Nothing of this process starts while an online request holds it (the request then waits
    // at most for the work already on the GPU), and the work in flight is bounded here, where
    // completions are seen first (the progress thread wakes this wait).
    bool request_running = !open && shm && online_request_open(shm, now);
    bool full = queue_full(slot, page);
    if (!request_running && !full && (open || balance(slot, page) >= need)) {
      __atomic_fetch_add(&page->tokens_taken_ns, cost_ns, __ATOMIC_ACQ_REL);
      break;
    }
    if (!start) {
      start = now;
      if (need > 1) publish_want(page, cost_ns);
    }
    if (!shm || now > __atomic_load_n(&shm->daemon_heartbeat_ns, __ATOMIC_ACQUIRE) + stale_ns) {
      // The daemon is gone or hung: let the kernel run. A filler's own queue still stays under
      // a bound it keeps without the daemon (its completions come from the GPU), so that a
      // daemon descheduled for a moment on a busy node does not let a launcher that never
      // synchronizes queue seconds of work in front of training.
      if (!pays_in_full() || !queue_over(page, fail_open_bound_ns)) {
        count(gate_counters().fail_open);
        break;
      }
      full = true;
    }
    if (request_running) {
      futex_wait(&shm->request_seq, request_seq, period_ns);  // the request's end wakes it
      continue;
    }
    uint32_t wake = __atomic_load_n(&slot->wake, __ATOMIC_ACQUIRE);
    if (!full && balance(slot, page) >= need) continue;
    // Both waits end on completions: the bound's, and the daemon's grants (it counts a filler's
    // work in flight). One that no marker covers would keep either shut for good.
    if (estimate_stuck(page, s, per_thread, now, stale_ns)) {
      __atomic_fetch_add(&page->inflight_fail_opens, 1, __ATOMIC_RELAXED);
      count(gate_counters().inflight_fail_open);
      break;
    }
    if (full) {
      // Completions are what this wait is for: look for them now and then often, rather than
      // a progress tick later (each look is an event query per marker passed). The progress
      // thread wakes this process's own word in its page (the slot's is the daemon's).
      uint32_t progress = __atomic_load_n(&page->progress_wake, __ATOMIC_ACQUIRE);
      poll_markers_now();
      futex_wait(&page->progress_wake, progress, period_ns / 8);
      continue;
    }
    // Bounded: re-check the daemon's heartbeat, at least as often as it may go stale.
    futex_wait(&slot->wake, wake, std::min(4 * period_ns, stale_ns));
  }
  if (start) {
    if (need > 1) __atomic_store_n(&page->gate_want_us, 0u, __ATOMIC_RELAXED);
    uint64_t waited = monotonic_ns() - start;
    __atomic_fetch_add(&page->gate_waits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&page->gate_wait_ns, waited, __ATOMIC_RELAXED);
    count(gate_counters().waits);
    count(gate_counters().wait_ns, waited);
  }
}

}  // namespace tandem::hook
