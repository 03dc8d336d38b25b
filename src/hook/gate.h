// The token gate of gated processes: batch inference always, training under policy `slo`
// while online inference is active. A launch takes tokens (ns of estimated GPU work): it counts
// them as spent in the process's page, against the limit the daemon raises in its slot; with
// none left it sleeps on the slot's futex until the daemon grants more.
// Under policy `slo` it also waits while an online request is open (woken by the request's
// end). Open gate: two loads. Every wait is bounded: the gate fails open when the daemon stops
// ticking.
#pragma once
#include <cstdint>

#include "daemon_link.h"

namespace tandem::hook {

// TANDEM_JOB_LOCAL=1 in a training process, fixed at bootstrap: no rank of its job is
// elsewhere, so its NCCL kernels may be gated like compute.
extern bool g_job_local;

void gate_wait(const tandem_slot* slot, tandem_client_page* page, uint64_t cost_ns) noexcept;

inline void gate_take(uint64_t cost_ns) noexcept {
  const tandem_slot* slot = current_slot();
  if (!slot) return;  // not registered, or the daemon is gone: fail open
  tandem_client_page* page = current_page();  // set before the slot
  if (__atomic_load_n(&slot->gate, __ATOMIC_ACQUIRE) != TANDEM_GATE_OPEN) gate_wait(slot, page, cost_ns);
  __atomic_fetch_add(&page->issued_ns, cost_ns, __ATOMIC_RELAXED);
}

}  // namespace tandem::hook
