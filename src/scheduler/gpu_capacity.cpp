#include "gpu_capacity.h"

#include <algorithm>
#include <cmath>

namespace tandem::scheduler {

void GpuCapacity::update(uint64_t now_ns, GpuState state, bool fillable, uint32_t fillers) {
  fillers_ = fillers;
  if (!started_ || now_ns <= last_ns_) {
    started_ = true;
    last_ns_ = std::max(last_ns_, now_ns);
    return;
  }
  const double dt = static_cast<double>(now_ns - last_ns_) / 1e9;
  last_ns_ = now_ns;
  measured_s_ += dt;
  const double long_keep = std::exp(-dt / config_.window_s);
  const bool filling = fillable && state == GpuState::bubble;
  if (was_filling_ && !filling) close_cycle();  // a bubble ended: so did its cycle
  was_filling_ = filling;
  cycle_s_ += dt;
  cycle_fillable_s_ += filling ? dt : 0;
  long_weight_ = long_weight_ * long_keep + dt;
  long_fillable_ = long_fillable_ * long_keep + (filling ? dt : 0);
  long_free_ = long_free_ * long_keep + (filling || state == GpuState::no_training ? dt : 0);
}

void GpuCapacity::close_cycle() {
  const double keep = std::exp(-cycle_s_ / config_.fast_window_s);
  // A cycle weighs its length, up to one window (a cycle longer than that weighs as much as
  // summing it tick by tick would); its share counts whole.
  const double scale = cycle_s_ > 0 ? config_.fast_window_s * (1 - keep) / cycle_s_ : 0;
  fast_weight_ = fast_weight_ * keep + cycle_s_ * scale;
  fast_fillable_ = fast_fillable_ * keep + cycle_fillable_s_ * scale;
  mean_cycle_s_ = mean_cycle_s_ > 0 ? 0.8 * mean_cycle_s_ + 0.2 * cycle_s_ : cycle_s_;
  cycle_s_ = cycle_fillable_s_ = 0;
}

double GpuCapacity::bubble_share() const {
  if (cycle_s_ <= std::min(2 * mean_cycle_s_, config_.fast_window_s)) return ratio(fast_fillable_, fast_weight_);
  // Overdue: counted as if it ended now.
  const double keep = std::exp(-cycle_s_ / config_.fast_window_s);
  const double scale = config_.fast_window_s * (1 - keep) / cycle_s_;
  return ratio(fast_fillable_ * keep + cycle_fillable_s_ * scale, fast_weight_ * keep + cycle_s_ * scale);
}

double GpuCapacity::pressure() const {
  if (!fillers_ || measured_s_ < config_.window_s) return 0;
  const double demand = fillers_ * config_.bubble.share;
  const double room = std::max(0.0, free_share_long() - config_.margin);
  return std::clamp(1 - room / demand, 0.0, 1.0);
}

}  // namespace tandem::scheduler
