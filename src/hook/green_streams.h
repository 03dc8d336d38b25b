// Live SM partitioning of a training process (policy slo under MPS; docs/slo.md, HARLI): while
// tandemd says an online request runs with partition P (the slot's live_partition, a
// percentage of the GPU's SMs), the process's compute launches go to green-context streams
// holding P, one per application stream (created the first time it is needed, with the
// application stream's priority); between requests they go back to the application's streams,
// on every SM.
//
// Order. Each application stream X has a *current* stream: X itself or one of its green
// streams. Every operation the application issues on X goes to X's current stream; a compute
// launch first makes the current stream the one it wants (a switch): an event recorded on the
// stream left and waited on by the stream taken, so the new stream runs after everything the
// old one holds. What X holds is therefore always a chain ending in its current stream, and
// synchronizing, querying, recording an event on or waiting on "X" (all of them hooked,
// green_order_hooks.cpp) act on that stream and cover X's work wherever it ran. NCCL kernels
// and graph launches follow the current stream without switching: a collective uses few SMs,
// and a graph's kernels run in the context they were captured in (a green stream would not
// confine them; splitting a graph across streams is not possible). Calls that must name X
// itself (a stream callback receives its stream, a capture begins on it, a synchronous copy
// runs on the legacy or per-thread stream) first switch X back (green_home).
// The legacy stream's implicit synchronization (it waits for the blocking streams' work and
// they for its) does not reach green streams, which are non-blocking: an operation of the
// legacy stream, or of a blocking or per-thread default stream, first waits explicitly for
// the other side's work that went to green streams since its stream last did.
//
// Captures are never redirected: while any capture is open in the process, every stream it
// touches is switched back first and launches go to their own streams.
//
// Fast path (no request running and no stream's work away from it): one load of a process
// flag and one of the slot's word, nothing else. A switch, and every call while redirected,
// take one mutex. Where green contexts are missing or refused (a driver before CUDA 12.4,
// the application's context not the primary one, an MPS client limited below 100% of the SMs)
// nothing is prepared, nothing is redirected, and the reason is logged once.
#pragma once
#include <atomic>
#include <cstdint>

#include "cuda_abi.h"
#include "daemon_link.h"
#include "progress.h"

namespace tandem::hook {

// One word, so that a launch with nothing to do reads one: bit 0 set once the partitions are
// prepared (a training process whose driver has green contexts), plus kAway for each
// application stream whose current stream is a green one.
struct GreenState {
  static constexpr uint32_t kReady = 1, kAway = 2;
  std::atomic<uint32_t> word{0};
  bool ready() const noexcept { return word.load(std::memory_order_acquire) & kReady; }
  uint32_t away() const noexcept { return word.load(std::memory_order_relaxed) / kAway; }
};
extern GreenState g_green;

// The progress thread, its first turn with the application's context current: prepares the
// partitions (logged once when it cannot); its page's flags then say which (green_partitions.h).
void prepare_green_partitions() noexcept;

// True when a launch or stream operation must go through the switching below.
inline bool green_engaged() noexcept {
  uint32_t word = g_green.word.load(std::memory_order_relaxed);
  if (__builtin_expect(word == 0, 1)) return false;  // not prepared (any other role), nothing away
  if (word != GreenState::kReady) return true;       // some stream's work is on a green stream
  const tandem_slot* slot = current_slot();
  return slot && __atomic_load_n(&slot->live_partition, __ATOMIC_RELAXED) != 0;
}

// The stream to launch on instead of `s` (`per_thread`: a _ptsz entry). `compute`: a compute
// kernel, which may switch `s` to the green stream of the partition in force (or back);
// otherwise (NCCL kernel, graph) it follows `s`'s current stream.
CUstream green_launch_stream_slow(CUstream s, bool per_thread, bool compute) noexcept;
inline CUstream green_launch_stream(CUstream s, bool per_thread, bool compute) noexcept {
  return green_engaged() ? green_launch_stream_slow(s, per_thread, compute) : s;
}

// Any other operation on `s`: the stream to issue it on (its current stream).
CUstream green_op_stream_slow(CUstream s, bool per_thread) noexcept;
inline CUstream green_op_stream(CUstream s, bool per_thread) noexcept {
  return green_engaged() ? green_op_stream_slow(s, per_thread) : s;
}

// An operation that must be issued on `s` itself: its work is brought back first.
void green_home_slow(CUstream s, bool per_thread) noexcept;
inline void green_home(CUstream s, bool per_thread) noexcept {
  if (green_engaged()) green_home_slow(s, per_thread);
}

// `s` is being destroyed: its green streams are destroyed too (their queued work still runs).
void green_stream_destroyed(CUstream s) noexcept;

// What the statistics file and tandemctl show.
struct GreenStats {
  uint64_t partitions = 0;        // prepared
  uint64_t redirected = 0;        // compute launches sent to a green stream
  uint64_t switches = 0;          // event pairs recorded and waited on
  uint64_t switch_ns = 0;         // host time spent in them
  uint64_t streams = 0;           // green streams created so far
  uint64_t live_streams = 0;      // of which not destroyed
  uint64_t untracked = 0;         // application streams past the table's capacity (not redirected)
};
GreenStats green_stats() noexcept;

// fork(): the child has none of the parent's green streams (they were the parent's threads'
// in the simulator, and a real child's CUDA starts anew); it prepares its own if it uses CUDA.
void green_after_fork_child() noexcept;

// Used by the CUlaunchConfig launches: `config` with its stream replaced by `s` (into `copy`).
inline const CUlaunchConfig* with_stream(const CUlaunchConfig* config, CUstream s, CUlaunchConfig& copy) noexcept {
  if (!config || config->hStream == s) return config;
  copy = *config;
  copy.hStream = s;
  return &copy;
}

}  // namespace tandem::hook
