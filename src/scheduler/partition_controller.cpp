#include "partition_controller.h"

#include <algorithm>

namespace tandem::scheduler {

unsigned live_levels(uint32_t training_flags, uint8_t out[TANDEM_LIVE_PARTITIONS]) {
  static constexpr uint8_t kPct[TANDEM_LIVE_PARTITIONS] = TANDEM_LIVE_LEVELS;
  unsigned n = 0;
  for (unsigned i = 0; i < TANDEM_LIVE_PARTITIONS; ++i) out[i] = 0;
  for (unsigned i = 0; i < TANDEM_LIVE_PARTITIONS; ++i)
    if (training_flags & TANDEM_TRAINING_LIVE(i)) out[n++] = kPct[i];
  return n;
}

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
    for (int i = 0; i < kMaxLevels; ++i) y_[i] = 0, measured_[i] = false, failures_[i] = 0, retry_after_[i] = 0;
    enter((levels_ - 2) / 2);  // the middle partition, or just below it
    below_lowest_ = false;
  }
  fixed_ = false;
  for (int i = 0; fixed && i < levels_; ++i)
    if (pct_[i] == fixed) fixed_ = true, level_ = i;
  return true;
}

void PartitionController::enter(int level) {
  probing_ = level > level_;
  level_ = level;
  recent_count_ = 0;
}

double PartitionController::median_of_recent(const double* v) const {
  int n = std::min(recent_count_, kRecent);
  if (n == 1) return v[0];
  if (n == 2) return std::min(v[0], v[1]);
  double sorted[kRecent] = {v[0], v[1], v[2]};
  std::sort(sorted, sorted + kRecent);
  return sorted[1];
}

void PartitionController::tick() {
  for (int i = 0; i < levels_; ++i)
    if (retry_after_[i] > 0) --retry_after_[i];
}

void PartitionController::skip() { tick(); }

double PartitionController::signal() const { return median_of_recent(recent_); }

void PartitionController::update(double y, double mean_ns, bool may_climb) {
  if (!configured()) return;
  tick();
  y_[level_] = measured_[level_] ? 0.5 * y_[level_] + 0.5 * y : y;
  measured_[level_] = true;
  recent_[recent_count_ % kRecent] = y;
  recent_mean_[recent_count_ % kRecent] = mean_ns;
  ++recent_count_;
  double s = signal(), mean = median_of_recent(recent_mean_);
  // One period decides only for a probe (a level entered from below): a level held, returned to
  // or started at leaves on two of three, whatever its first period says (a burst, a start).
  if (recent_count_ == 1 && !probing_) s = std::min(s, 1.0);
  // A larger partition that slows the requests themselves (HARLI's co-run latency: the solo one
  // times a slowdown) lifts every request's latency, the tail included, even while a period's
  // p99 of a few dozen requests stays under the target: as much a violation.
  if (probing_ && reference_mean_ > 0 && mean > reference_mean_ * (1.0 + kSlowdown)) s = std::max(s, 1.0 + kSlowdown);
  below_lowest_ = level_ == 0 && s > 1.0;
  if (recent_count_ >= kRecent && s <= 1.0) failures_[level_] = 0;  // it holds
  if (fixed_) return;
  if (s > 1.0) {
    if (level_ > 0) {
      int n = failures_[level_] < 4 ? failures_[level_]++ : 3;
      retry_after_[level_] = kBackoff << n < kBackoffMax ? kBackoff << n : kBackoffMax;
      enter(level_ - 1);
    }
  } else if (may_climb && s <= kClimbBelow && level_ + 1 < levels_ && recent_count_ >= kRecent &&
             retry_after_[level_ + 1] == 0) {
    reference_mean_ = mean;  // what the requests took here, to compare the next level with
    enter(level_ + 1);
  }
}

}  // namespace tandem::scheduler
