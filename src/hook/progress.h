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
  std::atomic<CUcontext> context{nullptr};     // published by the first launch
};
extern ProgressNotes g_notes;
extern uint32_t g_role;  // TANDEM_ROLE_*, fixed at bootstrap

// Starts the progress thread once per process (bootstrap, and a forked child's first call).
void start_progress_thread() noexcept;
void progress_after_fork_child() noexcept;

// Records a completion marker behind the work queued on `s` (launch path: the work before an
// NCCL kernel, so the collective itself counts as a bubble; a launch whose in-flight work is
// bounded, so its completion is seen early). Non-blocking: skipped when busy.
void record_marker_now(CUstream s, bool per_thread) noexcept;

// The cost estimate after a span between two markers that took `ratio` times its estimate.
// An exponential average, each step clamped (ratio within 0.25..4), so one odd span cannot
// swing it. On a shared GPU a span is lengthened by the other processes' work (and this
// process's waits at its gate), never shortened, so the estimate follows the short spans: it
// falls quickly (weight 0.1) and rises slowly (0.02), settling near the cost of the process's
// work alone; a large underestimate still climbs, 6% a span.
double next_cost_estimate(double estimate, double ratio) noexcept;

// Polls the completion markers now (a gated launch waiting for its in-flight work to drop,
// policy slo): the progress thread would see them up to a tick later. Skipped when busy.
void poll_markers_now() noexcept;

// Estimated GPU time of a launch in ns: grid x block scaled by the process's learned ns per
// thread (calibrated from completion markers).
uint64_t launch_cost_ns(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) noexcept;

}  // namespace tandem::hook
