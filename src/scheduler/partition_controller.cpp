#include "partition_controller.h"

#include <algorithm>

namespace tandem::scheduler {

bool PartitionController::configure(const uint8_t* pcts, unsigned count, uint32_t fixed) {
  uint32_t levels[kMaxLevels] = {};
  int n = 0;
  for (unsigned i = 0; i < count && i < TANDEM_LIVE_PARTITIONS && pcts[i]; ++i) levels[n++] = pcts[i];
  if (n == 0) {
    levels_ = 0;
    return false;
  }
  levels[n++] = 100;  // every SM: no partition
  if (n != levels_ || !std::equal(levels, levels + n, pct_)) {  // new levels: nothing known of them
    std::copy(levels, levels + n, pct_);
    levels_ = n;
    for (int i = 0; i < kMaxLevels; ++i) age_[i] = -1, y_[i] = 0, below_at_[i] = -1;
    enter((levels_ - 2) / 2);  // the middle partition, or just below it
    below_lowest_ = false;
  }
  fixed_ = false;
  for (int i = 0; fixed && i < levels_; ++i)
    if (pct_[i] == fixed) fixed_ = true, level_ = i;
  return true;
}

void PartitionController::enter(int level) {
  level_ = level;
  recent_count_ = 0;
}

void PartitionController::age() {
  for (int i = 0; i < levels_; ++i)
    if (age_[i] >= 0 && ++age_[i] > kForgetPeriods) age_[i] = -1;
}

void PartitionController::skip() { age(); }

double PartitionController::signal() const {
  int n = std::min(recent_count_, kRecent);
  if (n == 1) return recent_[0];
  if (n == 2) return std::min(recent_[0], recent_[1]);
  double v[kRecent] = {recent_[0], recent_[1], recent_[2]};
  std::sort(v, v + kRecent);
  return v[1];
}

void PartitionController::update(double y, bool may_climb) {
  if (!configured()) return;
  age();
  y_[level_] = age_[level_] >= 0 ? 0.5 * y_[level_] + 0.5 * y : y;
  age_[level_] = 0;
  recent_[recent_count_ % kRecent] = y;
  ++recent_count_;
  double s = signal();
  below_lowest_ = level_ == 0 && s > 1.0;
  // The first measurement of a level that went over the target with the level below.
  if (level_ + 1 < levels_ && below_at_[level_ + 1] == 0) below_at_[level_ + 1] = s;
  if (fixed_) return;
  if (s > 1.0) {
    if (level_ > 0) {
      below_at_[level_] = 0;  // set by the level below's first measurement
      enter(level_ - 1);
    }
  } else if (may_climb && s <= kClimbBelow && level_ + 1 < levels_ && recent_count_ >= kRecent) {
    int up = level_ + 1;
    // Over the target when last there: again only once this level is clearly faster than it
    // was then (the load fell), or once that is forgotten.
    bool lighter = below_at_[up] > 0 && s < below_at_[up] - kLighter;
    if (age_[up] < 0 || y_[up] <= 1.0 || lighter) enter(up);
  }
}

}  // namespace tandem::scheduler
