#include "bubble_detector.h"

#include <algorithm>

namespace tandem::scheduler {

namespace {
// Exponential average seeded by the first value. Weight 1/4: adapts within a few iterations
// when the job changes (e.g. a new batch size) but one odd iteration does not swing it.
uint64_t average(uint64_t mean, uint64_t samples_before, uint64_t value) {
  return samples_before == 0 ? value : (mean * 3 + value) / 4;
}
}  // namespace

void BubbleDetector::Profile::learn(uint64_t length) {
  mean_ns = average(mean_ns, bubbles, length);
  lengths[bubbles % kHistory] = length;
  ++bubbles;
}

uint64_t BubbleDetector::Profile::likely_length(uint64_t age_ns) const {
  // A bubble that has lasted age_ns is one of those that lasted longer. A quarter of them
  // ended sooner than the figure returned: filler work admitted up to it runs into training's
  // resumption in those, by what is still in flight then (the in-flight bound).
  std::array<uint64_t, kHistory> longer;
  size_t n = 0;
  for (size_t i = 0; i < std::min<uint64_t>(bubbles, kHistory); ++i)
    if (lengths[i] > age_ns) longer[n++] = lengths[i];
  if (n == 0) return age_ns;
  auto quarter = longer.begin() + static_cast<std::ptrdiff_t>(n / 4);
  std::nth_element(longer.begin(), quarter, longer.begin() + static_cast<std::ptrdiff_t>(n));
  return *quarter;
}

BubbleDetector::BubbleDetector(int quiet_samples_for_bubble)
    : quiet_needed_(quiet_samples_for_bubble < 1 ? 1 : quiet_samples_for_bubble) {}

bool BubbleDetector::quiet(const TrainingSample& prev, const TrainingSample& s) {
  // Launches going backwards (a training client left, so the sum dropped) is not "no
  // progress": treat it as busy for one sample rather than open a bubble on it.
  bool no_launches = s.launches == prev.launches;
  // >= rather than ==: the per-client counters are read one after another, so a marker may
  // be seen completed before it is seen recorded. Nothing pending either way.
  bool nothing_pending = s.markers_completed >= s.markers_recorded;
  return no_launches && nothing_pending;
}

void BubbleDetector::end_phase(uint64_t at_ns) {
  uint64_t length = at_ns > phase_started_ns_ ? at_ns - phase_started_ns_ : 0;
  if (phase_ == GpuPhase::bubble) {
    all_.learn(length);
    kinds_[in_collective_ ? 1 : 0].learn(part_length(at_ns));
    if (length > longest_bubble_ns_) longest_bubble_ns_ = length;
  } else if (busy_measured_) {
    mean_busy_ns_ = average(mean_busy_ns_, busy_phases_, length);
    ++busy_phases_;
  }
}

void BubbleDetector::enter(GpuPhase next, uint64_t at_ns) {
  end_phase(at_ns);
  // Every busy phase after the first bubble is whole, so it may be learned from.
  if (next == GpuPhase::busy) busy_measured_ = true;
  phase_ = next;
  phase_started_ns_ = at_ns;
  if (next == GpuPhase::bubble) {
    in_collective_ = communicating_;
    part_started_ns_ = at_ns;
  }
}

GpuPhase BubbleDetector::update(const TrainingSample& s) {
  if (!initialized_) {
    initialized_ = true;
    last_ = s;
    phase_started_ns_ = s.now_ns;
    return phase_;
  }
  bool is_quiet = quiet(last_, s);
  last_ = s;
  // A bubble's kind is the collectives' state at its first quiet sample (it is dated from it).
  if (!is_quiet || quiet_run_ == 0) communicating_ = s.communicating;
  if (!is_quiet) {
    quiet_run_ = 0;
    if (phase_ == GpuPhase::bubble) enter(GpuPhase::busy, s.now_ns);
    return phase_;
  }
  if (quiet_run_++ == 0) first_quiet_ns_ = s.now_ns;
  if (phase_ == GpuPhase::busy && quiet_run_ >= quiet_needed_) enter(GpuPhase::bubble, first_quiet_ns_);
  if (phase_ == GpuPhase::bubble && in_collective_ && !s.communicating) {  // the collective is over
    kinds_[1].learn(part_length(s.now_ns));
    in_collective_ = false;
    part_started_ns_ = s.now_ns;
  }
  return phase_;
}

uint64_t BubbleDetector::predicted_bubble_end_ns() const {
  if (phase_ != GpuPhase::bubble || all_.bubbles == 0) return 0;
  const Profile& kind = kinds_[in_collective_ ? 1 : 0];
  const Profile& p = kind.bubbles ? kind : all_;
  return part_started_ns_ + p.likely_length(part_length(last_.now_ns));
}

}  // namespace tandem::scheduler
