#include "slo_policy.h"

#include <algorithm>

namespace tandem::scheduler {

uint64_t SloPolicy::inflight_bound_ns() const {
  return static_cast<uint64_t>(controller_.duty() * static_cast<double>(p_.window_ns));
}

void SloPolicy::step(uint64_t now_ns, const std::vector<OnlineClient>& online, const std::vector<FillerState>& best_effort,
                     std::vector<Grant>& grants) {
  grants.clear();
  if (!interval_started_ns_) interval_started_ns_ = now_ns;
  if (now_ns - interval_started_ns_ >= p_.control_period_ns) {
    control(now_ns, online);
    interval_started_ns_ = now_ns;
  }
  active_ = false;
  for (const OnlineClient& c : online)
    if (c.requests_open > 0 || now_ns - c.activity_ns < p_.idle_ns) active_ = true;
  if (best_effort.empty() || !active_) return;
  // The duty cycle's GPU time for this period, shared equally; a balance never grows past the
  // in-flight share (the clients bound what is in flight themselves, see inflight_share_ns).
  auto n = static_cast<int64_t>(best_effort.size());
  int64_t rate = static_cast<int64_t>(controller_.duty() * static_cast<double>(p_.period_ns)) / n;
  int64_t cap = static_cast<int64_t>(inflight_share_ns(best_effort.size()));
  for (const FillerState& c : best_effort) {
    int64_t amount = std::min(rate, cap - std::max<int64_t>(c.tokens_ns, 0));
    if (amount > 0) grants.push_back({c.id, amount});
  }
}

uint64_t SloPolicy::inflight_share_ns(size_t clients) const {
  return clients ? inflight_bound_ns() / clients : 0;
}

void SloPolicy::control(uint64_t now_ns, const std::vector<OnlineClient>& online) {
  // The worst client against its own target; only figures measured in this interval count.
  const OnlineClient* worst = nullptr;
  double worst_ratio = 0;
  uint32_t samples = 0;
  for (const OnlineClient& c : online) {
    if (c.latency_seq != control_seq_ || c.samples == 0 || c.slo_ns == 0) continue;
    samples += c.samples;
    double ratio = static_cast<double>(c.latency_ns) / static_cast<double>(c.slo_ns);
    if (!worst || ratio > worst_ratio) worst = &c, worst_ratio = ratio;
  }
  if (worst) controller_.update(worst_ratio);
  else controller_.skip();
  if (history_.size() == kHistory) history_.pop_front();
  history_.push_back({now_ns, worst ? static_cast<double>(worst->latency_ns) / 1e6 : 0.0,
                      worst ? static_cast<double>(worst->slo_ns) / 1e6 : 0.0, controller_.duty(), samples, active_});
  ++control_seq_;
}

}  // namespace tandem::scheduler
