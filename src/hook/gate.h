// The token gate of gated processes: batch inference always, training under policy `slo`
// while online inference is active. A launch takes tokens (ns of estimated GPU work): it counts
// them as spent in the process's page, against the limit the daemon raises in its slot; with
// none left it sleeps on the slot's futex until the daemon grants more.
// Under policy `slo` it also waits while an online request is open (woken by the request's
// end). Open gate: two loads, and the in-flight bound's one (three more when it is set). Every
// wait is bounded: the gate fails open when the daemon stops ticking.
#pragma once
#include <cstdint>

#include "daemon_link.h"
#include "progress.h"

namespace tandem::hook {

// TANDEM_JOB_LOCAL=1 in a training process, fixed at bootstrap: no rank of its job is
// elsewhere, so its NCCL kernels may be gated like compute.
extern bool g_job_local;

// Waits until the launch of `cost_ns` on stream `s` may start (`s` and `per_thread` name the
// stream a marker can be put on: the waiting thread's own).
void gate_wait(const tandem_slot* slot, tandem_client_page* page, uint64_t cost_ns, CUstream s, bool per_thread) noexcept;

// An online request open now holds this process's gated launches (policy slo: within its
// floor, not a busy server's; policy fill: any, for a batch filler; gate.cpp).
bool online_request_open(const tandem_shm_header* shm, uint64_t now) noexcept;

// The process's launched-but-unfinished work has reached the bound tandemd set in its slot (0:
// none). With the gate open it is a filler's bound while no training job is on the GPU.
inline bool queue_over(const tandem_client_page* page, uint64_t bound) noexcept {
  if (!bound) return false;
  uint64_t issued = __atomic_load_n(&page->issued_ns, __ATOMIC_RELAXED);
  uint64_t completed = __atomic_load_n(&page->completed_ns, __ATOMIC_ACQUIRE);
  return issued > completed && issued - completed >= bound;
}
inline bool queue_full(const tandem_slot* slot, const tandem_client_page* page) noexcept {
  return queue_over(page, __atomic_load_n(&slot->inflight_bound_ns, __ATOMIC_RELAXED));
}

// A filler's launches before its first registration attempt has ended wait for it (bounded by
// TANDEM_FAIL_OPEN_MS): ungated, a launcher that never synchronizes would queue seconds of work
// in the milliseconds registration takes. Returns the slot, or null (no daemon: fail open).
const tandem_slot* slot_after_first_link() noexcept;

inline void gate_take(uint64_t cost_ns, CUstream s, bool per_thread) noexcept {
  const tandem_slot* slot = current_slot();
  if (!slot && g_role == TANDEM_ROLE_BATCH_INFERENCE && g_link_attempts.load(std::memory_order_relaxed) == 0)
    slot = slot_after_first_link();
  if (!slot) return;  // not registered, or the daemon is gone: fail open
  tandem_client_page* page = current_page();  // set before the slot
  if (__atomic_load_n(&slot->gate, __ATOMIC_ACQUIRE) != TANDEM_GATE_OPEN || queue_full(slot, page))
    gate_wait(slot, page, cost_ns, s, per_thread);
  __atomic_fetch_add(&page->issued_ns, cost_ns, __ATOMIC_RELAXED);
}

}  // namespace tandem::hook
