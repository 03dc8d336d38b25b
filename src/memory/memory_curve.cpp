#include "memory_curve.h"

#include <algorithm>

namespace tandem::scheduler {

namespace {
// The trough and the peak are the extremes of the last few seconds: long enough to span
// several iterations, short enough to follow a job whose weights were allocated late.
constexpr uint64_t kWindowNs = 3'000'000'000ull;
}  // namespace

MemoryCurve::MemoryCurve(uint64_t bin_ns) : bin_ns_(bin_ns ? bin_ns : 1) {}

uint64_t MemoryCurve::threshold_bytes() const { return trough_ + (peak_ - trough_) / 16; }

uint64_t MemoryCurve::period_ns() const {
  if (starts_.size() < 2) return 0;
  std::vector<uint64_t> gaps;
  for (size_t i = 1; i < starts_.size(); ++i) gaps.push_back(starts_[i] - starts_[i - 1]);
  std::nth_element(gaps.begin(), gaps.begin() + static_cast<long>(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

uint64_t MemoryCurve::at(uint64_t since_start_ns) const {
  uint64_t bin = since_start_ns / bin_ns_;
  return bin < curve_.size() ? curve_[bin] : trough_;
}

uint64_t MemoryCurve::falling_position_ns(uint64_t bytes) const {
  size_t top = static_cast<size_t>(std::max_element(curve_.begin(), curve_.end()) - curve_.begin());
  size_t bin = top;
  while (bin < curve_.size() && curve_[bin] > bytes) ++bin;
  return bin * bin_ns_;
}

uint64_t MemoryCurve::iteration_peak_bytes() const {
  return in_iteration_ && !current_.empty() ? *std::max_element(current_.begin(), current_.end()) : 0;
}

void MemoryCurve::mark_start(uint64_t now_ns) { pending_start_ns_ = now_ns; }

void MemoryCurve::update_levels(uint64_t now_ns, uint64_t bytes) {
  // A process holding nothing has not begun (or has ended): no trough to learn from.
  if (bytes) {
    while (!lows_.empty() && lows_.back().second >= bytes) lows_.pop_back();
    while (!highs_.empty() && highs_.back().second <= bytes) highs_.pop_back();
    lows_.emplace_back(now_ns, bytes);
    highs_.emplace_back(now_ns, bytes);
  }
  while (!lows_.empty() && lows_.front().first + kWindowNs < now_ns) lows_.pop_front();
  while (!highs_.empty() && highs_.front().first + kWindowNs < now_ns) highs_.pop_front();
  trough_ = lows_.empty() ? bytes : lows_.front().second;
  peak_ = highs_.empty() ? bytes : highs_.front().second;
}

void MemoryCurve::add(uint64_t now_ns, uint64_t bytes) {
  update_levels(now_ns, bytes);
  last_bytes_ = bytes;
  bool above = bytes > threshold_bytes();
  if (!in_iteration_ && above) {
    // The start tandemd allowed, when this rise follows it; else the first sample above.
    bool allowed = pending_start_ns_ && pending_start_ns_ <= now_ns && now_ns - pending_start_ns_ < kMaxIterationNs;
    started_ns_ = allowed ? pending_start_ns_ : now_ns;
    pending_start_ns_ = 0;
    in_iteration_ = true;
    current_.assign(static_cast<size_t>((now_ns - started_ns_) / bin_ns_), trough_);
    start_trough_ = trough_;
  }
  if (!in_iteration_) return;
  if (now_ns - started_ns_ > kMaxIterationNs) {  // no iteration this long: start over
    in_iteration_ = false;
    current_.clear();
    return;
  }
  auto bin = static_cast<size_t>((now_ns - started_ns_) / bin_ns_);
  // A late tick leaves bins without a sample: they hold the use seen before them.
  if (bin >= current_.size()) {
    current_.resize(bin, current_.empty() ? bytes : current_.back());
    current_.push_back(bytes);
  }
  current_[bin] = std::max(current_[bin], bytes);
  if (!above) end_iteration();
}

void MemoryCurve::end_iteration() {
  in_iteration_ = false;
  // The first rise ever seen began before any trough was: its start and trough are unknown.
  if (!seen_first_) {
    seen_first_ = true;
    current_.clear();
    return;
  }
  // A trough that moved during the "iteration" (weights allocated or freed) made it: no curve.
  uint64_t tolerance = (peak_ - trough_) / 16;
  uint64_t moved = trough_ > start_trough_ ? trough_ - start_trough_ : start_trough_ - trough_;
  if (moved > tolerance) {
    current_.clear();
    return;
  }
  recorded_.push_back(std::move(current_));
  current_.clear();
  starts_.push_back(started_ns_);
  if (recorded_.size() > kIterationsKept) recorded_.pop_front();
  if (starts_.size() > kIterationsKept + 1) starts_.pop_front();
  ++iterations_;
  rebuild();
}

void MemoryCurve::rebuild() {
  curve_.clear();
  for (const std::vector<uint64_t>& it : recorded_) {
    if (it.size() > curve_.size()) curve_.resize(it.size(), 0);
    for (size_t i = 0; i < it.size(); ++i) curve_[i] = std::max(curve_[i], it[i]);
  }
}

}  // namespace tandem::scheduler
