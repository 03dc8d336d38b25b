#include "bubble_detector.h"

namespace tandem::scheduler {

namespace {
// Exponential average that starts at the first value.
uint64_t average(uint64_t mean, uint64_t value) { return mean == 0 ? value : (mean * 3 + value) / 4; }
}  // namespace

BubbleDetector::BubbleDetector(int quiet_samples_for_bubble)
    : quiet_needed_(quiet_samples_for_bubble < 1 ? 1 : quiet_samples_for_bubble) {}

void BubbleDetector::enter(GpuPhase next, uint64_t at_ns) {
  uint64_t length = at_ns > phase_started_ns_ ? at_ns - phase_started_ns_ : 0;
  if (phase_ == GpuPhase::bubble) {
    mean_bubble_ns_ = average(mean_bubble_ns_, length);
    if (length > longest_bubble_ns_) longest_bubble_ns_ = length;
    ++bubbles_;
  } else if (phase_started_ns_) {
    mean_busy_ns_ = average(mean_busy_ns_, length);
  }
  phase_ = next;
  phase_started_ns_ = at_ns;
}

GpuPhase BubbleDetector::update(const TrainingSample& s) {
  if (!initialized_) {
    initialized_ = true;
    last_ = s;
    phase_started_ns_ = s.now_ns;
    return phase_;
  }
  bool quiet = s.launches == last_.launches && s.markers_completed >= s.markers_recorded;
  last_ = s;
  if (!quiet) {
    quiet_run_ = 0;
    if (phase_ == GpuPhase::bubble) enter(GpuPhase::busy, s.now_ns);
    return phase_;
  }
  if (quiet_run_++ == 0) first_quiet_ns_ = s.now_ns;
  if (phase_ == GpuPhase::busy && quiet_run_ >= quiet_needed_) enter(GpuPhase::bubble, first_quiet_ns_);
  return phase_;
}

uint64_t BubbleDetector::predicted_bubble_end_ns() const {
  if (phase_ != GpuPhase::bubble || mean_bubble_ns_ == 0) return 0;
  return phase_started_ns_ + mean_bubble_ns_;
}

}  // namespace tandem::scheduler
