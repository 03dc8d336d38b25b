// Decides from training progress whether a GPU is in a bubble (SpecInF's bubble monitor).
// Pure logic: one sample per period, time passed in, no I/O.
//
// A sample is quiet when no training compute kernel was launched since the previous sample and
// no completion marker is pending (recorded <= completed), i.e. no training compute work is
// queued on the GPU. That gets the three cases right:
//   CPU ran ahead   no new launches but markers pending: the GPU is still busy;
//   communication   only NCCL kernels left, and those are not counted: bubble;
//   host gap        nothing launched, nothing pending: bubble.
// busy -> bubble after `quiet_samples_for_bubble` consecutive quiet samples; the bubble is
// dated from the first of them. bubble -> busy at the first sample that is not quiet.
// Bubbles are learned in two kinds for their predicted end: the part of a bubble in which
// training's collectives are in flight (data parallelism's all-reduce, with the optimizer's
// kernels queued behind it) is the tail of a collective, often far shorter than the
// data-loading pause of the same iteration; averaged together, every data-loading pause
// looked about to end long before it did, and fillers were granted nothing in the rest.
// A bubble that began in a collective and goes on once it is over (nothing queued behind it)
// is one bubble for the fill policy; its collective part and the rest are learned apart, and
// the rest is predicted from the collective's end.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace tandem::scheduler {

struct TrainingSample {
  uint64_t now_ns;
  uint64_t launches;           // compute kernels launched (monotonic, summed over training clients)
  uint64_t markers_recorded;   // completion markers put behind compute work
  uint64_t markers_completed;  // markers the GPU has passed
  bool communicating = false;  // training's collectives in flight (NCCL markers pending, not point-to-point)
};

enum class GpuPhase { busy, bubble };

class BubbleDetector {
 public:
  explicit BubbleDetector(int quiet_samples_for_bubble = 1);

  // One call per sample period. The very first call only initializes (phase stays busy).
  GpuPhase update(const TrainingSample& s);
  GpuPhase phase() const { return phase_; }
  // When the current phase began; for a bubble, the time of its first quiet sample.
  uint64_t phase_started_ns() const { return phase_started_ns_; }

  // The learned iteration profile: exponential moving averages (weight 1/4 on the newest) over
  // completed phases. The partial busy phase before the first bubble is not counted.
  uint64_t mean_bubble_ns() const { return all_.mean_ns; }
  uint64_t mean_busy_ns() const { return mean_busy_ns_; }
  uint64_t longest_bubble_ns() const { return longest_bubble_ns_; }
  // Completed bubbles, i.e. those the profile has learned from.
  uint64_t bubbles() const { return all_.bubbles; }
  // Whether the current (or last) bubble is in its collective part.
  bool bubble_in_collective() const { return in_collective_; }
  // While in a bubble, when it will end at the earliest that is likely, given how long it has
  // lasted: of the last kHistory bubbles (parts) of its kind that lasted longer than the current
  // part has so far, the length that three in four reached, from the start of the current part
  // (the bubble's, or the collective's end); of every bubble while no part of its kind has been
  // learned. The current part's age as of the last sample; once it has outlasted every bubble
  // learned, the end is that sample (nothing more is expected). 0 when busy or nothing learned.
  // Lengths differ by position in an iteration (a pipeline stage: many 1-3 ms gaps between
  // micro-batches and one 20 ms wait for the gradients; DDP: an all-reduce's tail and data
  // loading), so a mean predicts none of them: the long ones looked about to end after a few
  // milliseconds and were granted nothing in the rest. Conditioned on its age, a bubble that
  // has outlasted the short kind is predicted as the long kind it is.
  uint64_t predicted_bubble_end_ns() const;
  static constexpr size_t kHistory = 64;

 private:
  static bool quiet(const TrainingSample& prev, const TrainingSample& s);
  void end_phase(uint64_t at_ns);
  void enter(GpuPhase next, uint64_t at_ns);
  uint64_t part_length(uint64_t at_ns) const { return at_ns > part_started_ns_ ? at_ns - part_started_ns_ : 0; }

  int quiet_needed_;
  bool initialized_ = false;
  bool busy_measured_ = false;  // false during the partial busy phase seen at start-up
  TrainingSample last_{};
  int quiet_run_ = 0;
  uint64_t first_quiet_ns_ = 0;
  GpuPhase phase_ = GpuPhase::busy;
  uint64_t phase_started_ns_ = 0;
  uint64_t mean_busy_ns_ = 0, longest_bubble_ns_ = 0, busy_phases_ = 0;
  // Bubbles (or parts of them) learned: their mean length (shown), the last kHistory lengths
  // (the prediction) and how many.
  struct Profile {
    uint64_t mean_ns = 0, bubbles = 0;
    std::array<uint64_t, kHistory> lengths{};
    void learn(uint64_t length);
    // The length that three in four of the learned bubbles longer than `age_ns` reached; `age_ns`
    // when none was.
    uint64_t likely_length(uint64_t age_ns) const;
  };
  Profile all_;       // whole bubbles, as the fill policy sees them
  Profile kinds_[2];  // their parts: [0] quiet with no collective in flight, [1] a collective's tail
  bool in_collective_ = false;  // the current part's kind
  uint64_t part_started_ns_ = 0;
  bool communicating_ = false;  // the last sample's
};

}  // namespace tandem::scheduler
