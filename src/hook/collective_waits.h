// Compute queued behind a collective. A framework makes its compute stream wait for a
// collective with an event: the event is recorded on NCCL's stream after the collective's
// kernel (cuEventRecord), the compute stream waits for it (cuStreamWaitEvent), and the kernels
// launched next queue behind it (DDP's optimizer step behind the gradients' last all-reduce).
// Their completion markers would be pending while only the collective runs, and tandemd would
// count the GPU busy then: nothing could be filled beside the all-reduce (TANDEM_FILL_COMM=1).
// So a marker recorded on a stream that waits for a collective not yet seen over is counted
// as recorded (work on the GPU) only once that collective is over (progress.cpp), and so are
// the kernels launched there meanwhile: a launch tells tandemd that training's GPU is busy, and
// the optimizer's launches split the collective's tail into two bubbles and a busy millisecond.
#pragma once
#include <atomic>
#include <cstdint>

#include "cuda_abi.h"

namespace tandem::hook {

// Launch hooks, after an NCCL kernel of a managed process: one relaxed add.
void note_collective_issued() noexcept;
// NCCL kernels issued so far: a collective's ordinal is the count after its kernel.
uint64_t collectives_issued() noexcept;

// cuEventRecord*, training: an event recorded on the stream of the last NCCL kernel is
// remembered with that kernel's ordinal. Returns whether it was (the caller then puts an NCCL
// marker behind the collective, so that its end is seen).
bool note_event_record(CUevent e, CUstream s, bool per_thread) noexcept;
// cuStreamWaitEvent*, training: a stream waiting for a remembered event is behind its collective.
void note_stream_wait(CUstream s, CUevent e, bool per_thread) noexcept;

// The ordinal of the collective that work queued on `s` now waits for; 0 when none, or when it
// is over already. Inline: one relaxed load on every managed launch of a process none of whose
// streams ever waited for a collective (a filler's, an inference server's).
namespace collective_detail {
extern std::atomic<uint64_t> g_waited_ordinal;  // the collective last waited for (0: none yet)
}  // namespace collective_detail
uint64_t collective_ahead_of_slow(CUstream s, bool per_thread) noexcept;
inline uint64_t collective_ahead_of(CUstream s, bool per_thread) noexcept {
  if (__builtin_expect(!collective_detail::g_waited_ordinal.load(std::memory_order_relaxed), 1)) return 0;
  return collective_ahead_of_slow(s, per_thread);
}
// A launch of `kernels` queued behind a collective: counted for the page later. Lock-free.
void note_queued_launches(uint64_t kernels) noexcept;
// The launches queued behind the collective last waited for, once it is over (then 0 again).
uint64_t take_launches_no_longer_queued() noexcept;

// NCCL markers: every collective up to `ordinal` is over (an NCCL marker behind it passed).
void collectives_over_through(uint64_t ordinal) noexcept;
uint64_t collectives_over() noexcept;

void collective_waits_after_fork_child() noexcept;

}  // namespace tandem::hook
