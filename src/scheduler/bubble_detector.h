// Decides from training progress whether a GPU is in a bubble (SpecInF's bubble monitor).
// Pure logic: one sample per period, time passed in. A sample is quiet when no training
// kernel was launched since the previous one and no completion marker is pending, that is,
// no training compute work is queued on the GPU. Three cases come out right: the CPU ran
// ahead (no launches, markers pending: busy), communication (only NCCL kernels, which are not
// counted, pending: bubble), host gap (nothing pending: bubble).
#pragma once
#include <cstdint>

namespace tandem::scheduler {

struct TrainingSample {
  uint64_t now_ns;
  uint64_t launches;           // compute kernels launched (monotonic, summed over training clients)
  uint64_t markers_recorded;   // completion markers put behind compute work
  uint64_t markers_completed;  // markers the GPU has passed
};

enum class GpuPhase { busy, bubble };

class BubbleDetector {
 public:
  explicit BubbleDetector(int quiet_samples_for_bubble = 1);

  GpuPhase update(const TrainingSample& s);
  GpuPhase phase() const { return phase_; }
  uint64_t phase_started_ns() const { return phase_started_ns_; }

  // The learned iteration profile: exponential averages over completed phases.
  uint64_t mean_bubble_ns() const { return mean_bubble_ns_; }
  uint64_t mean_busy_ns() const { return mean_busy_ns_; }
  uint64_t longest_bubble_ns() const { return longest_bubble_ns_; }
  uint64_t bubbles() const { return bubbles_; }
  // When the current bubble is expected to end (0 when busy or nothing learned yet).
  uint64_t predicted_bubble_end_ns() const;

 private:
  void enter(GpuPhase next, uint64_t at_ns);

  int quiet_needed_;
  bool initialized_ = false;
  TrainingSample last_{};
  int quiet_run_ = 0;
  uint64_t first_quiet_ns_ = 0;
  GpuPhase phase_ = GpuPhase::busy;
  uint64_t phase_started_ns_ = 0;
  uint64_t mean_bubble_ns_ = 0, mean_busy_ns_ = 0, longest_bubble_ns_ = 0, bubbles_ = 0;
};

}  // namespace tandem::scheduler
