// What a gated launch costs: the GPU time (ns) tokens and the in-flight bound are counted in.
// Learned per kernel shape — a function and its grid, or a graph exec as a whole — from the
// kernel's own GPU time: a sampled launch is bracketed by two timing events on its stream, and
// their elapsed time is what the kernel took on the GPU. Neither host gaps between launches
// (a framework's Python), nor the time until the progress thread looks, nor the process's
// waits at its gate are in it; only another process's kernels running beside it can lengthen
// it, so the learned value follows the short measurements (falls fast, rises slowly). tandemd
// tells each client in which periods another client had work on the GPU
// (tandem_slot.others_busy_ticks): a timing that spanned one shared the GPU and may lower a
// cost but never raise it. Without this, four fillers beside each other were charged about
// twice what their requests took on the GPU, and used 0.58-0.63 of the bubbles, not 0.73-0.76.
//
// A shape not timed yet costs the process's learned ns per thread times its threads (learned
// from long kernels only, where the time is in proportion to the threads), at least a small
// kernel's floor and at most kMaxGuessNs: a guess is corrected by the launch's own timing, and
// a wild one (a spin kernel's time over its few threads) must not hold a new shape at the gate
// for longer than any bubble. Each shape is timed on its first launches, then one launch in
// 32, so a kernel whose time depends on its arguments is followed too.
//
// Lock-free for the launch path: a lookup is a probe of a fixed table; a sample takes a slot
// with one compare-and-swap and records two events. Costs are written by one poller at a time
// (the progress thread, or the first launch of a shape not learned yet).
//
// The launch path's fast case (a filler's every launch once its shapes are learned) is inline
// here: kernel_charge() is one probe of the table, whose value holds both the cost and how many
// timings taught it, so the same probe says whether this launch is timed; and one plain
// increment of the launch ordinal. It was two probes (the cost, then again to decide the
// sample), an atomic read-modify-write of the ordinal and three calls: 47-63 ns added to a
// filler's launch against the null driver, and the null driver (no timing events) kept every
// shape unlearned, which polled and timed every launch. Learning, polling and timing stay out
// of line, taken only by a launch that is timed or whose shape is not learned.
#pragma once
#include <atomic>
#include <cstdint>

#include "cuda_abi.h"
#include "handle_map.h"
#include "tandem/shm_abi.h"

namespace tandem::hook {

constexpr uint64_t kMinKernelCostNs = 2000;  // launch to completion of the smallest kernel
constexpr uint64_t kMaxGuessNs = 1000000;    // what a shape never timed is charged at most

// The first launches of a shape are timed (kLearnSamples), then one in kSampleEvery of all
// gated launches.
constexpr uint32_t kLearnSamples = 4;
constexpr uint64_t kSampleEvery = 32;

// The key of a kernel shape (function, blocks in its grid) and of a graph exec.
inline uintptr_t kernel_cost_key(const void* function, uint64_t blocks) noexcept {
  // Mixing the grid in keeps shapes of one function apart; 0 is the map's empty key.
  uintptr_t k = reinterpret_cast<uintptr_t>(function) ^ (blocks * 0x9E3779B97F4A7C15ull);
  return k ? k : 1;
}
uintptr_t graph_cost_key(const void* exec) noexcept;

namespace cost_detail {
// A learned cost in the handle map: low 48 bits ns (78 hours), 15 bits samples, the top bit
// set while every timing it came from shared the GPU.
constexpr uint64_t kNsBits = 48;
constexpr uint64_t kNsMask = (1ull << kNsBits) - 1;
constexpr uint32_t kMaxSamples = 0x7fff;
constexpr uint64_t kSharedOnly = 1ull << 63;
inline uint64_t ns_of(uint64_t v) noexcept { return v & kNsMask; }
inline uint32_t samples_of(uint64_t v) noexcept { return static_cast<uint32_t>((v >> kNsBits) & kMaxSamples); }

// Gated launches so far: which one in kSampleEvery is timed. A relaxed load and store, not an
// atomic add (a locked instruction on every filler launch): two threads launching at once may
// count one launch where they made two, which only moves which launch is timed.
extern std::atomic<uint64_t> g_launches;
inline uint64_t next_launch_ordinal() noexcept {
  uint64_t n = g_launches.load(std::memory_order_relaxed);
  g_launches.store(n + 1, std::memory_order_relaxed);
  return n;
}
// A launch of a shape `v` (the table's value, or HandleMap::kAbsent) is timed while the shape is
// learning, then when its ordinal `n` falls on one in kSampleEvery.
inline bool timed_launch(uint64_t v, uint64_t n) noexcept {
  return v == HandleMap::kAbsent || samples_of(v) < kLearnSamples || n % kSampleEvery == 0;
}
}  // namespace cost_detail

// What a gated launch of a kernel shape is charged, and whether it is timed (then the caller
// brackets it: cost_sample_claim() before, cost_sample_end() after).
struct ShapeCharge {
  uint64_t ns;
  bool timed;
};
// Out of line: a shape not learned yet, or learning (fewer than kLearnSamples timings): polls
// the samples, looks again, else guesses from `threads`.
ShapeCharge kernel_charge_learning(uintptr_t key, uint64_t threads, uint64_t n) noexcept;
inline ShapeCharge kernel_charge(uintptr_t key, uint64_t threads) noexcept {
  using namespace cost_detail;
  uint64_t n = next_launch_ordinal();
  uint64_t v = kernel_costs().find(key);
  if (__builtin_expect(v != HandleMap::kAbsent && samples_of(v) >= kLearnSamples, 1))
    return {ns_of(v), n % kSampleEvery == 0};
  return kernel_charge_learning(key, threads, n);
}
// A graph exec: its learned GPU time (0 when never timed: the caller charges its kernel nodes)
// and whether this replay is timed. Never polls.
ShapeCharge graph_charge(uintptr_t key) noexcept;

// Learned GPU time of `key`, or 0 when it was never timed.
uint64_t learned_cost_ns(uintptr_t key) noexcept;

// The estimate a launch of `key` with `threads` threads is charged.
uint64_t kernel_cost_ns(uintptr_t key, uint64_t threads) noexcept;

// Timing one launch: begin() before the launch (returns a sample id, or -1 when this launch is
// not sampled or no slot is free), end() after it. `threads` 0: a graph (no per-thread lesson).
// `slot`: this process's slot in the GPU's segment (nullptr: no daemon, every timing taken as
// made alone). begin() counts the launch and decides as kernel_charge() does; claim() times a
// launch kernel_charge() or graph_charge() said is timed.
int cost_sample_begin(uintptr_t key, uint64_t threads, CUstream s, bool per_thread, const tandem_slot* slot) noexcept;
int cost_sample_claim(uintptr_t key, uint64_t threads, CUstream s, bool per_thread, const tandem_slot* slot) noexcept;
void cost_sample_finish(int sample, CUstream s, bool per_thread, bool launched) noexcept;
inline void cost_sample_end(int sample, CUstream s, bool per_thread, bool launched) noexcept {
  if (sample >= 0) cost_sample_finish(sample, s, per_thread, launched);
}

// Completed samples update the learned costs: the progress thread every tick, and a launch of
// a shape not learned yet. One caller at a time; a second returns at once.
void poll_cost_samples() noexcept;
void cost_samples_after_fork_child() noexcept;

// The learning rules (pure, unit-tested). A shape's cost: its first measurement, then a step
// half of the way down to a shorter one and an eighth of the way up to a longer one. A timing
// that shared the GPU (`shared`) is an upper bound on the cost: it only lowers one, and a cost
// learned from such timings alone (`shared_only`) falls to a shorter one at once and is
// replaced by the first timing made alone.
struct LearnedCost {
  uint64_t ns = 0;
  uint32_t samples = 0;
  bool shared_only = false;
};
LearnedCost next_learned_cost(LearnedCost learned, uint64_t measured_ns, bool shared = false) noexcept;
// ns per thread (1/1024 ns fixed point) from a kernel of `threads` that took `measured_ns`;
// kernels shorter than kPerThreadMinNs teach nothing (their time is mostly fixed cost), and
// one that shared the GPU only a lower rate.
constexpr uint64_t kPerThreadMinNs = 50000;
uint64_t next_ns_per_thread_q10(uint64_t q10, uint64_t threads, uint64_t measured_ns, bool shared = false) noexcept;

// Figures for the stats file and tests.
struct CostFigures {
  uint64_t samples;       // timed launches completed
  uint64_t shared;        // of those, the ones that shared the GPU with another client's work
  uint64_t shapes;        // kernel shapes with a learned cost
  uint64_t ns_per_thread_q10;
};
CostFigures cost_figures() noexcept;

}  // namespace tandem::hook
