// One training job's memory over its iteration (Zico's "memory demand pattern", docs/zico.md),
// learned from the bytes in use tandemd samples from the job's page every period. Training
// allocates activations in the forward pass and frees them in the backward pass, so the
// bytes in use rise from a trough (weights and optimizer state) to a peak and fall back once
// per iteration. An iteration is seen as the use rising above the trough's threshold and
// ends when it falls back to it; its samples, aligned on its start, form one curve. The curve
// kept is the element-wise maximum of the last few iterations (conservative: a prediction from
// it never undercounts a job that repeats itself), the period the median start-to-start time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace tandem::scheduler {

class MemoryCurve {
 public:
  // `bin_ns`: the curve's resolution (the sampling period).
  explicit MemoryCurve(uint64_t bin_ns);

  // One sample of the job's bytes in use at `now_ns` (non-decreasing).
  void add(uint64_t now_ns, uint64_t bytes);
  // tandemd let the job start an iteration now: the next rise belongs to it and its curve is
  // aligned on this moment (the delay from here to the first allocation is part of it).
  void mark_start(uint64_t now_ns);

  // Enough complete iterations seen to predict the job.
  bool learned() const { return iterations_ >= kIterationsToLearn; }
  uint64_t iterations() const { return iterations_; }
  uint64_t trough_bytes() const { return trough_; }
  uint64_t peak_bytes() const { return peak_; }
  // Use at most this counts as "at the trough" (between iterations): a sixteenth of the way
  // from the trough to the peak (one layer's activations are usually more).
  uint64_t threshold_bytes() const;
  // Median start-to-start time of the last iterations (0: fewer than two seen).
  uint64_t period_ns() const;
  // From an iteration's start to its return to the trough, the longest seen lately.
  uint64_t active_ns() const { return curve_.size() * bin_ns_; }
  // The predicted use `since_start_ns` after an iteration's start: the curve, then the trough.
  uint64_t at(uint64_t since_start_ns) const;
  // Where on its falling side (after its peak) the curve first comes down to `bytes`: the
  // position of a job seen falling, whatever the time since its start (it may run slower than
  // when its curve was learned).
  uint64_t falling_position_ns(uint64_t bytes) const;
  // The highest use seen in the iteration under way (0: none under way); below it, the job is
  // in its backward pass.
  uint64_t iteration_peak_bytes() const;
  // True while an iteration is under way (the use is above the threshold).
  bool in_iteration() const { return in_iteration_; }
  // When the current (or the last) iteration started; 0: none yet.
  uint64_t started_ns() const { return started_ns_; }
  uint64_t last_bytes() const { return last_bytes_; }
  uint64_t bin_ns() const { return bin_ns_; }

  static constexpr uint64_t kIterationsToLearn = 2;
  static constexpr size_t kIterationsKept = 4;
  // Longer than this is not an iteration (the trough moved, e.g. weights allocated later):
  // the samples are dropped rather than kept as a curve.
  static constexpr uint64_t kMaxIterationNs = 10'000'000'000ull;

 private:
  void end_iteration();
  void rebuild();
  void update_levels(uint64_t now_ns, uint64_t bytes);

  uint64_t bin_ns_;
  // The trough and the peak of the recent samples (a few seconds), before and between
  // iterations: each a monotonic queue of (time, bytes), so a sample costs O(1) amortized (a
  // scan of the window's thousands of samples made tandemd's tick 30 times dearer).
  std::deque<std::pair<uint64_t, uint64_t>> lows_, highs_;
  uint64_t trough_ = 0, peak_ = 0;
  bool in_iteration_ = false;
  uint64_t started_ns_ = 0, pending_start_ns_ = 0, last_bytes_ = 0;
  uint64_t start_trough_ = 0;  // the trough when the iteration under way started
  bool seen_first_ = false;    // the first iteration (no trough seen before it) is not learned from
  std::vector<uint64_t> current_;               // the iteration under way, by bin
  std::deque<std::vector<uint64_t>> recorded_;  // the last complete iterations
  std::deque<uint64_t> starts_;                 // their start times
  std::vector<uint64_t> curve_;                 // element-wise max of recorded_
  uint64_t iterations_ = 0;
};

}  // namespace tandem::scheduler
