#include "gpu_usage.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::scheduler {

namespace {
// Less than this much weighted time in the window (none in the last minute or so): no estimate.
constexpr double kMinWeightSeconds = 0.01;
}  // namespace

void GpuUsage::update(uint64_t now_ns, GpuState state, double training_allowed, uint64_t others_work_ns) {
  if (!started_ || now_ns <= last_ns_) {
    started_ = started_ || now_ns > 0;
    last_ns_ = now_ns;
    last_state_ = state;
    return;
  }
  const double dt = static_cast<double>(now_ns - last_ns_) / 1e9;
  const double work = static_cast<double>(others_work_ns) / 1e9;
  // The interval is counted in the state the tick found: it is what the GPU was doing when
  // the interval ended (ticks are a sample period apart, far shorter than a phase).
  const int i = static_cast<int>(state);
  seconds_[i] += dt;
  work_s_[i] += work;
  const double keep = std::exp(-dt / kWindowSeconds);
  w_bubble_ *= keep;
  w_bubble_work_ *= keep;
  w_training_ *= keep;
  w_allowed_ *= keep;
  w_stolen_ *= keep;
  if (state == GpuState::bubble) {
    w_bubble_ += dt;
    w_bubble_work_ += work;
  }
  if (state != GpuState::no_training) {
    w_training_ += dt;
    w_allowed_ += dt * std::clamp(training_allowed, 0.0, 1.0);
    if (state == GpuState::busy) w_stolen_ += work;
  }
  last_ns_ = now_ns;
  last_state_ = state;
}

double GpuUsage::bubble_use() const {
  if (w_bubble_ < kMinWeightSeconds) return std::numeric_limits<double>::quiet_NaN();
  return std::clamp(w_bubble_work_ / w_bubble_, 0.0, 1.0);
}

double GpuUsage::training_retained() const {
  if (w_training_ < kMinWeightSeconds) return std::numeric_limits<double>::quiet_NaN();
  return std::clamp((w_allowed_ - w_stolen_) / w_training_, 0.0, 1.0);
}

}  // namespace tandem::scheduler
