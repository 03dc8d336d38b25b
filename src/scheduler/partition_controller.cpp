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
    for (int i = 0; i < kMaxLevels; ++i) y_[i] = 0, mean_[i] = 0, measured_[i] = false, failures_[i] = 0, retry_after_[i] = 0;
    enter(0);  // the smallest: each larger one is then judged against the one below
    below_lowest_ = false;
    ceiling_ = levels_ - 1;
    fitted_ = false;
  }
  fixed_ = false;
  for (int i = 0; fixed && i < levels_; ++i)
    if (pct_[i] == fixed) fixed_ = true, level_ = i;
  return true;
}

void PartitionController::fit(uint32_t width_pct) {
  if (!configured() || fixed_) return;
  const bool known = width_pct > 0 && width_pct < 100;  // narrower than the GPU
  int ceiling = levels_ - 1;
  if (known) {
    ceiling = 0;  // the smallest at least: below it the duty cycle decides
    for (int i = 0; i < levels_; ++i)
      if (pct_[i] + width_pct <= 100) ceiling = i;
  }
  ceiling_ = ceiling;
  if (level_ > ceiling_ || (known && !fitted_ && level_ < ceiling_)) {
    // Above: the level left never had the requests' room (not a failure of it). Below, the
    // first time: the start, the partition predicted to leave the requests their SMs.
    enter(ceiling_);
    probing_ = false;
  }
  fitted_ = fitted_ || known;
}

void PartitionController::enter(int level) {
  probing_ = level > level_;
  level_ = level;
  recent_count_ = 0;
}

double PartitionController::median_of_recent(const double* v, int at_least) const {
  // Of the values known (> 0) among the last kRecent periods at the level: the one, the lower of
  // two, the median of three (0 with fewer than `at_least`).
  double known[kRecent];
  int n = 0;
  for (int i = 0; i < std::min(recent_count_, kRecent); ++i)
    if (v[i] > 0) known[n++] = v[i];
  if (n == 0 || n < at_least) return 0;
  if (n == 1) return known[0];
  if (n == 2) return std::min(known[0], known[1]);
  std::sort(known, known + kRecent);
  return known[1];
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
  // The clients' running mean still carries the previous level's requests in the first period
  // at a level: only later ones count.
  recent_mean_[recent_count_ % kRecent] = recent_count_ ? mean_ns : 0;
  ++recent_count_;
  double s = signal(), mean = median_of_recent(recent_mean_, 2);
  // One period decides only for a probe (a level entered from below): a level held, returned to
  // or started at leaves on two of three, whatever its first period says (a burst, a start).
  if (recent_count_ == 1 && !probing_) s = std::min(s, 1.0);
  // The slowdown of the requests over the level below (0: unknown): HARLI's co-run latency is
  // the solo one times a slowdown; measured here as that slowdown, it says whether training's
  // SMs are what lifts the latency.
  double slowdown = level_ > 0 && mean_[level_ - 1] > 0 && mean > 0 ? mean / mean_[level_ - 1] : 0;
  if (mean > 0) mean_[level_] = mean;
  bool slows = slowdown > 1.0 + kSlowdown;
  below_lowest_ = level_ == 0 && s > 1.0;
  if (recent_count_ >= kRecent && s <= 1.0 && !slows) failures_[level_] = 0;  // it holds
  if (fixed_) return;
  // Down when the partition slows the requests, or when they are over the target and it may be
  // why (a slowdown not known); over the target at the level below's speed is inference's own
  // tail (its bursts), which fewer SMs for training would not shorten.
  bool blamed = s > 1.0 && (slowdown == 0 || slowdown > 1.0 + kSlowdown / 2);
  if (level_ > 0 && (slows || blamed)) {
    int n = failures_[level_] < 4 ? failures_[level_]++ : 3;
    retry_after_[level_] = kBackoff << n < kBackoffMax ? kBackoff << n : kBackoffMax;
    enter(level_ - 1);
  } else if (may_climb && s <= (mean > 0 ? 1.0 : kClimbBelow) && level_ + 1 <= ceiling_ && recent_count_ >= kRecent &&
             retry_after_[level_ + 1] == 0) {
    enter(level_ + 1);
  }
}

}  // namespace tandem::scheduler
