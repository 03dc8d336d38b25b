// Zico's iteration boundary in a training process (docs/zico.md). tandemd publishes in the
// process's slot the use at which the job is between iterations (its trough); the first
// allocation made at or below it (the forward pass's first activation) starts an iteration and
// waits there until tandemd gives a permit, i.e. until the job's predicted memory fits beside
// the other training jobs'. Transparent: the program only sees a slower allocation. One wait
// per iteration (re-armed once the use was seen above the trough); every wait is bounded
// (TANDEM_ZICO_MAX_WAIT_MS) and ends at once when the daemon stops ticking or turns it off.
#pragma once
#include <cstdint>

#include "daemon_link.h"

namespace tandem::hook {

void zico_boundary(const tandem_slot* slot, uint64_t trough_bytes) noexcept;

// Before an allocation: two loads when tandemd holds nobody (no slot, or no trough published).
inline void zico_at_allocation() noexcept {
  const tandem_slot* slot = current_slot();
  if (!slot) return;
  uint64_t trough = __atomic_load_n(&slot->zico_trough_bytes, __ATOMIC_ACQUIRE);
  if (trough) zico_boundary(slot, trough);
}

// True while tandemd time-shifts this training process against another job of the GPU: a
// published trough, or (a job whose profiling ran out of time publishes none) the slot's
// zico_shared. Its pool then gives idle chunks back at every tick.
inline bool zico_sharing(const tandem_slot* slot) noexcept {
  return slot && (__atomic_load_n(&slot->zico_trough_bytes, __ATOMIC_ACQUIRE) ||
                  __atomic_load_n(&slot->zico_shared, __ATOMIC_ACQUIRE));
}

// Zico starts an iteration beside another job's backward pass: what that pass frees reaches the
// GPU a moment later, when its progress thread gives its idle pool chunks back (and a chunk with
// a live block in it stays). An allocation the GPU cannot serve meanwhile waits for that memory
// rather than fail the job: after an allocation failed with out-of-memory, true (having slept
// 1 ms) while tandemd time-shifts this job and less than kZicoMemoryWaitNs passed since the
// first failure (`since_ns`, 0 before it; counted once in memory.zico_memory_waits).
constexpr uint64_t kZicoMemoryWaitNs = 1000000000ull;
bool zico_memory_retry(uint64_t& since_ns) noexcept;

// From the progress thread: an iteration whose allocations all came before its use passed
// the trough is still seen (the next boundary must wait again).
void zico_progress_tick() noexcept;

}  // namespace tandem::hook
