// Training jobs whose ranks are processes of this node (torchrun: one process per GPU):
// their collectives can be held back only on every rank together, never on one alone (its
// peers would wait inside theirs). A rank says which job it belongs to in its hello; tandemd
// gives every rank of a complete job the same limit in its slot (collectives_allowed), so the
// n-th NCCL kernel either passes on every rank or waits on every rank (docs/slo.md).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "daemon_link.h"

namespace tandem::hook {

// The job, decided once at bootstrap: TANDEM_JOB_LOCAL=1 in a training process with
// torchrun's WORLD_SIZE > 1, LOCAL_WORLD_SIZE = WORLD_SIZE and MASTER_ADDR/MASTER_PORT set.
struct JobIdentity {
  std::string key;     // names the job on this node: MASTER_ADDR:MASTER_PORT[/TORCHELASTIC_RUN_ID]
  uint32_t ranks = 0;  // processes in the job, all on this node; 0: not grouped
};
void read_job_identity() noexcept;
const JobIdentity& job_identity() noexcept;

// Every NCCL kernel this process launched directly (graphs' NCCL nodes are not counted: a
// replay is not held). Counted from the first, registered or not, so every rank numbers its
// collectives alike.
extern std::atomic<uint64_t> g_collectives_launched;
extern bool g_job_grouped;  // job_identity().ranks > 1

void collective_wait(const tandem_slot* slot, tandem_client_page* page, uint64_t n) noexcept;

// Before a grouped rank's NCCL kernel: two loads while nothing is held.
inline void collective_take() noexcept {
  const tandem_slot* slot = current_slot();
  if (!slot) return;  // not registered, or the daemon is gone: fail open
  uint64_t n = g_collectives_launched.load(std::memory_order_relaxed) + 1;
  uint64_t allowed = __atomic_load_n(&slot->collectives_allowed, __ATOMIC_ACQUIRE);
  if (allowed && n >= allowed) collective_wait(slot, current_page(), n);
}

// The page's count only rises (tandemd takes a count that falls for a misbehaving client):
// launching threads and the progress thread may publish out of order.
inline void publish_collectives(tandem_client_page* page, uint64_t n) noexcept {
  uint64_t seen = __atomic_load_n(&page->collectives_launched, __ATOMIC_RELAXED);
  while (seen < n && !__atomic_compare_exchange_n(&page->collectives_launched, &seen, n, true, __ATOMIC_RELEASE,
                                                  __ATOMIC_RELAXED)) {
  }
}

// After it was launched.
inline void collective_launched() noexcept {
  uint64_t n = g_collectives_launched.fetch_add(1, std::memory_order_relaxed) + 1;
  if (tandem_client_page* page = current_page()) publish_collectives(page, n);
}

}  // namespace tandem::hook
