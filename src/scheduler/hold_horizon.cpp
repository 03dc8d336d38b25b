#include "hold_horizon.h"

#include <algorithm>

namespace tandem::scheduler {

void HoldHorizon::tick(const RequestHolds::Pace& pace, uint64_t busy_ns) {
  if (pace.window_start_ns != window_start_ns_) {  // a window ended: adjust the base by its use
    if (window_start_ns_ && last_allowed_ns_ > 0) {
      double used = last_held_ns_ / last_allowed_ns_;
      if (used > 0.9) base_ns_ = std::min(busy_ns, base_ns_ + busy_ns / 16);
      else if (used < 0.6) base_ns_ -= std::min(base_ns_, busy_ns / 16);
    }
    window_start_ns_ = pace.window_start_ns;
  }
  last_held_ns_ = pace.held_ns;
  last_allowed_ns_ = pace.allowed_ns;
  double ahead = pace.held_ns - pace.allowed_by_now_ns;  // used beyond the pace (< 0: behind it)
  double horizon = std::clamp(static_cast<double>(base_ns_) + ahead, 0.0, static_cast<double>(busy_ns));
  horizon_ns_ = static_cast<uint64_t>(horizon);
}

bool HoldHorizon::bubble_due(uint64_t now_ns, uint64_t busy_started_ns, uint64_t busy_ns) const {
  if (!busy_ns || !horizon_ns_) return false;
  uint64_t due = busy_started_ns + busy_ns;
  return now_ns + horizon_ns_ >= due && now_ns <= due + horizon_ns_;
}

}  // namespace tandem::scheduler
