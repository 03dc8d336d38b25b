// What a registered process tells tandemd, and the thread that keeps it current.
// Launch hooks write a few relaxed atomics (progress notes, shared-memory counters, tokens);
// the progress thread, started at bootstrap for processes with a role, registers with the
// daemon, records completion markers (events behind the launched work) and polls them, so
// the daemon sees GPU-side progress, not just launches: PyTorch's CPU runs ahead of the GPU.
#pragma once
#include <atomic>
#include <cstdint>

#include "cuda_abi.h"
#include "daemon_link.h"

namespace tandem::hook {

// Progress notes written by launch hooks, read by the progress thread.
struct ProgressNotes {
  std::atomic<CUstream> last_stream{nullptr};
  std::atomic<bool> last_per_thread{false};
  std::atomic<bool> work_since_marker{false};  // launches not yet covered by a marker
  std::atomic<bool> last_was_nccl{false};
  std::atomic<CUstream> nccl_stream{nullptr};  // where the last NCCL kernel went
  std::atomic<bool> nccl_per_thread{false};
  std::atomic<bool> nccl_since_marker{false};  // NCCL kernels not yet covered by an NCCL marker
  // Of those, a collective (not point-to-point): the next NCCL marker stands behind one.
  std::atomic<bool> collective_since_marker{false};
  // Set by the progress thread when the last launch went to a thread's own stream (which it
  // cannot name): the next launch to such a stream records the tick's marker instead.
  std::atomic<bool> own_stream_marker_wanted{false};
  std::atomic<CUcontext> context{nullptr};     // published by the first launch
};
extern ProgressNotes g_notes;
// TANDEM_ROLE_*, set at bootstrap; registration may change it once (a refused protected role
// is registered as batch-inference, a grant's socket registers its own role: docs/security.md).
extern std::atomic<uint32_t> g_role;

// A per-thread default stream, implicit (a null stream through a _ptsz entry) or the explicit
// CU_STREAM_PER_THREAD handle, is the calling thread's own: only that thread can put a marker
// behind its work (recorded from the progress thread, the marker lands on the progress
// thread's own stream and completes at once).
inline bool thread_own_stream(CUstream s, bool per_thread) noexcept {
  return s == CU_STREAM_PER_THREAD || (per_thread && !s);
}

// Launch path, after a launch to `s`: records the progress tick's marker when the progress
// thread asked for one it could not record (own_stream_marker_wanted). One relaxed load when
// nothing is wanted.
void record_wanted_marker(CUstream s, bool per_thread) noexcept;
inline void record_marker_if_wanted(CUstream s, bool per_thread) noexcept {
  if (__builtin_expect(g_notes.own_stream_marker_wanted.load(std::memory_order_relaxed), 0) &&
      thread_own_stream(s, per_thread))
    record_wanted_marker(s, per_thread);
}

// A gated launch that waits for its in-flight work to fall, from its own thread: true when a
// marker is pending (its completion will lower the estimate). Otherwise the estimate covers
// work no marker stands behind (a stream only another thread could name, a skipped record):
// it records one behind `s` and says whether it could.
bool completion_in_sight(CUstream s, bool per_thread) noexcept;

// Starts the progress thread once per process (bootstrap, and a forked child's first call).
void start_progress_thread() noexcept;
void progress_after_fork_child() noexcept;

// Records a completion marker behind the work queued on `s` (launch path: the work before an
// NCCL kernel, so the collective itself counts as a bubble; a launch whose in-flight work is
// bounded, so its completion is seen early). Non-blocking: skipped when busy.
void record_marker_now(CUstream s, bool per_thread) noexcept;
// The same before an NCCL kernel, waiting for the markers' lock (the progress thread holds it
// for a few event queries): skipped, the work before the collective was covered by no marker
// (none is put behind a collective, which would make it look busy), its in-flight estimate never
// fell, and a training launch gated by an in-flight bound waited for it for good (training
// stalled for seconds in 1 run of 4 to 6 of the realistic MPS workload).
void record_marker_before_collective(CUstream s, bool per_thread) noexcept;

// An NCCL marker behind the collective just issued on `s`, unless one is there already (an
// event recorded behind it, that a stream may wait for: its end must be seen, which is when
// the markers queued behind it count; collective_waits.h). Waits for the markers' lock.
void record_marker_behind_collective(CUstream s, bool per_thread) noexcept;

// Polls the completion markers now (a gated launch waiting for its in-flight work to drop,
// policy slo): the progress thread would see them up to a tick later. Skipped when busy.
void poll_markers_now() noexcept;

}  // namespace tandem::hook
