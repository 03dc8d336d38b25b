#include "slo_policy.h"

#include <algorithm>

namespace tandem::scheduler {

uint64_t SloPolicy::inflight_bound_ns() const {
  double factor = live_ && controller_.duty() >= kSpatialGateDuty ? kLiveWindow : unheld_ ? kBusyWindow : 1.0;
  return static_cast<uint64_t>(given_duty_ * static_cast<double>(p_.window_ns) * factor);
}

void SloPolicy::step(uint64_t now_ns, const std::vector<OnlineClient>& online, const std::vector<FillerState>& best_effort,
                     std::vector<Grant>& grants, bool spatial, const uint8_t* live_levels) {
  spatial_ = spatial;
  uint32_t fixed = p_.live_partition > 0 ? static_cast<uint32_t>(p_.live_partition) : 0;
  live_ = live_levels && p_.live_partition != 0 && partition_.configure(live_levels, TANDEM_LIVE_PARTITIONS, fixed);
  if (live_) {
    uint32_t width = 0;  // the widest client's
    for (const OnlineClient& c : online) width = std::max(width, c.width_pct);
    partition_.fit(width);
  }
  grants.clear();
  if (!interval_started_ns_) interval_started_ns_ = now_ns;
  if (now_ns - interval_started_ns_ >= p_.control_period_ns) {
    control(now_ns, online);
    busy_fraction_ = ticks_ ? static_cast<double>(busy_ticks_) / static_cast<double>(ticks_) : 0;
    // Busy for kBusyPeriods periods in a row: a Poisson burst fills one period now and then,
    // a server with requests back to back fills them all.
    std::copy(busy_recent_ + 1, busy_recent_ + kBusyPeriods, busy_recent_);
    busy_recent_[kBusyPeriods - 1] = busy_fraction_;
    interval_started_ns_ = now_ns;
    duty_sum_ = 0, ticks_ = 0, busy_ticks_ = 0, mean_request_sum_ = 0;
    for (const OnlineClient& c : online)
      if (c.id >= 0 && c.id < kSlots) models_[c.id].requests_at_start = c.requests;
  } else {
    predict(now_ns, online);
  }
  active_ = false;
  bool open = false;
  for (const OnlineClient& c : online) {
    if (c.requests_open > 0 || now_ns - c.activity_ns < p_.idle_ns) active_ = true;
    open = open || c.requests_open > 0;
  }
  busy_ticks_ += open;
  uint64_t request_ns = 0;  // the slowest client's running mean latency (its page's request_ns)
  for (const OnlineClient& c : online) request_ns = std::max(request_ns, c.request_ns);
  mean_request_sum_ += static_cast<double>(request_ns);
  // Live partitions: training stays gated while inference is active, for the in-flight bound
  // between requests (what a request's onset finds queued on every SM), but is not held during
  // requests while the partition holds the target (the duty cycle at least kSpatialGateDuty).
  gating_ = active_ && !(spatial_ && controller_.duty() >= kSpatialGateDuty);
  bool partitioned = live_ && controller_.duty() >= kSpatialGateDuty;
  // Holding training during every request would leave it 1 - busy of the time: lifted when
  // that is below both its duty cycle and kBusyHold's complement.
  double busy = *std::min_element(busy_recent_, busy_recent_ + kBusyPeriods);
  unheld_ = gating_ && (partitioned || busy > std::max(kBusyHold, 1.0 - controller_.duty()));
  pin_partition(now_ns, online);
  duty_sum_ += gating_ ? given_duty_ : 1.0;  // ungated, training has the whole GPU it can get
  ++ticks_;
  if (best_effort.empty() || !gating_) return;
  // The duty cycle's GPU time for this period, shared equally; a balance never grows past one
  // period's grant (nor the in-flight share, when larger), so no burst is saved up. The clients
  // bound what is in flight themselves (inflight_share_ns); capping the balance at that smaller
  // window instead let training use at most window/period of the GPU even at full duty.
  auto n = static_cast<int64_t>(best_effort.size());
  int64_t rate = static_cast<int64_t>(given_duty_ * static_cast<double>(p_.period_ns)) / n;
  int64_t cap = std::max(rate, static_cast<int64_t>(inflight_share_ns(best_effort.size())));
  for (const FillerState& c : best_effort) {
    int64_t amount = std::min(rate, cap - std::max<int64_t>(c.tokens_ns, 0));
    if (amount > 0) grants.push_back({c.id, amount});
  }
}

void SloPolicy::pin_partition(uint64_t now_ns, const std::vector<OnlineClient>& online) {
  // The partition applies while a request runs and training is not held during it (held, it
  // launches nothing anyway). A request whose client began or ended none for partition_pin_ns
  // pins nothing: held open, it would confine training for as long as the stuck rule allows
  // (up to 10 s, for ever when refreshed), while the busy-server rule and the holds' floor lift
  // its time hold within about a second; a server with requests back to back begins and ends
  // them all the time and keeps its partition.
  const uint32_t pct = partition_pct();
  const double floor = p_.controller.min_duty;
  pinned_ = false;
  // A partition smaller than the floor itself could not give training the floor at any duty
  // cycle: not applied (TANDEM_LIVE_LEVELS start at 25%, so this is only a guard).
  if (unheld_ && pct > 0 && floor * 100.0 <= static_cast<double>(pct))
    for (const OnlineClient& c : online)
      if (c.requests_open > 0 && now_ns < c.activity_ns + p_.partition_pin_ns) pinned_ = true;
  // The one floor: training on p of the SMs at duty d has d x p of the GPU, so the duty cycle it
  // is given has min_duty / p as its floor there (0.2 at 25%). Raising the floor of what is given
  // rather than widening the partition keeps the requests their SMs, and costs them only
  // training's time on its own part of the GPU. The controller's own duty cycle is left as the
  // latencies set it (its gain is identified from its steps; a floor it did not choose would
  // read as one). While the partition holds the target the duty cycle is at least
  // kSpatialGateDuty, above min_duty / p for every level: nothing changes there. Only a busy
  // server's requests, unheld below it, can find the duty cycle under min_duty / p.
  given_duty_ = pinned_ ? std::min(1.0, std::max(controller_.duty(), floor * 100.0 / static_cast<double>(pct)))
                        : controller_.duty();
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
  // Each client's model learns from the interval: the duty cycle training had, the load.
  double duty = ticks_ ? duty_sum_ / static_cast<double>(ticks_) : controller_.duty();
  for (const OnlineClient& c : online) {
    if (c.id < 0 || c.id >= kSlots || c.latency_seq != control_seq_ || c.samples == 0 || c.slo_ns == 0) continue;
    ClientModel& m = models_[c.id];
    if (m.generation != c.generation) m.model.reset(), m.generation = c.generation;
    m.model.observe(duty, load(c, now_ns), static_cast<double>(c.latency_ns) / static_cast<double>(c.slo_ns));
  }
  if (!live_) {
    if (worst) controller_.update(worst_ratio);
    else controller_.skip();
  } else if (!worst) {
    controller_.skip();
    partition_.skip();
  } else {
    // The partition first; the duty cycle only below the smallest one, on the partition's
    // filtered signal (and back up to 1 before the partition grows again).
    bool lowest = partition_.level() == 0;
    partition_.update(worst_ratio, ticks_ ? mean_request_sum_ / static_cast<double>(ticks_) : 0,
                      controller_.duty() >= 1.0);
    // At most kLiveDutyInput: the signal a burst makes (2.5 x the target, whatever training
    // does) must not cut the duty cycle to a third at once; a lasting violation still walks it
    // down, 0.1 a period at the initial gain.
    if (lowest && (partition_.below_lowest() || controller_.duty() < 1.0))
      controller_.update(std::min(partition_.signal(), kLiveDutyInput));
    else controller_.skip();
  }
  if (history_.size() == kHistory) history_.pop_front();
  history_.push_back({now_ns, worst ? static_cast<double>(worst->latency_ns) / 1e6 : 0.0,
                      worst ? static_cast<double>(worst->slo_ns) / 1e6 : 0.0, controller_.duty(), samples, active_,
                      partition_pct()});
  ++control_seq_;
}

// Inference's GPU utilization over the interval so far: requests ended times one's GPU time.
double SloPolicy::load(const OnlineClient& c, uint64_t now_ns) const {
  uint64_t elapsed = now_ns - interval_started_ns_;
  if (!elapsed || c.id < 0 || c.id >= kSlots || c.requests < models_[c.id].requests_at_start) return 0;
  double ended = static_cast<double>(c.requests - models_[c.id].requests_at_start);
  return ended * static_cast<double>(c.request_ns) / static_cast<double>(elapsed);
}

void SloPolicy::predict(uint64_t now_ns, const std::vector<OnlineClient>& online) {
  // Not under an SM split: there a duty cycle below 1 switches the gate on (requests then hold
  // training entirely), a step the linear model does not describe; a cut on a latency spike
  // training did not cause took training from 0.5-0.67 to 0.33 of Exclusive (MPS, measured).
  if (spatial_ || live_ || !p_.predict) return;
  // A quarter of the period in: enough requests to see the load, most of the period left.
  if (now_ns - interval_started_ns_ < p_.control_period_ns / 4) return;
  for (const OnlineClient& c : online) {
    if (c.id < 0 || c.id >= kSlots || models_[c.id].generation != c.generation) continue;
    // Only a clear violation ahead (a burst): near the target the feedback is right, and cutting
    // on every prediction a little over it held training at 0.25 of Exclusive (time slicing).
    double duty = 0, now_load = load(c, now_ns);
    if (models_[c.id].model.predict(controller_.duty(), now_load) < kPredictedViolation) continue;
    if (!models_[c.id].model.duty_for(1.0, now_load, &duty) || duty >= controller_.duty()) continue;
    controller_.cap(duty);
    ++predicted_cuts_;
  }
}

}  // namespace tandem::scheduler
