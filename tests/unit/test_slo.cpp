// Policy slo: the controller on a simulated linear plant (GPUColo's model), the policy's
// idle/active gating and control intervals, and the clients' cost estimate under sharing.
#include <catch2/catch.hpp>

#include <cmath>

#include "gpu_scheduler.h"
#include "slo_controller.h"
#include "slo_policy.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;

// y(k) = base + m * duty(k): the normalized latency the plant answers for a duty cycle.
struct Plant {
  double base, m;
  double latency(double duty) const { return base + m * duty; }
};

// Runs `periods` control periods; returns the duty cycle at the end.
double run(SloController& c, const Plant& p, int periods) {
  for (int k = 0; k < periods; ++k) c.update(p.latency(c.duty()));
  return c.duty();
}

// 1 ms ticks and a control period of 10: a few control periods in a few dozen steps.
SloParams ten_tick_periods() {
  SloParams p;
  p.period_ns = kMs;
  p.control_period_ns = 10 * kMs;
  return p;
}

// One online client with a request open and a 10 ms target, beside one training client, under
// an SM split (every training client's page says "part of the SMs").
struct SplitGpu {
  SloPolicy policy{ten_tick_periods()};
  std::vector<FillerState> training{{3, 0, 0, true}};
  std::vector<Grant> grants;
  OnlineClient online;
  explicit SplitGpu(uint32_t samples) {
    online.requests_open = 1;
    online.slo_ns = 10 * kMs;
    online.samples = samples;
  }
  void step(uint64_t t) {
    online.activity_ns = t;
    policy.step(t, {online}, training, grants, true);
  }
};
}  // namespace

TEST_CASE("SloController: settles the latency at the target, zero steady-state error") {
  SloController c;
  Plant plant{0.6, 0.8};  // full duty: 1.4 x target; target reached at duty 0.5
  run(c, plant, 30);
  CHECK(c.duty() == Approx(0.5).margin(0.01));
  CHECK(plant.latency(c.duty()) == Approx(1.0).margin(0.01));
  CHECK_FALSE(c.saturated());
}

TEST_CASE("SloController: stable with a true gain 2.5 to 3.3 times off, and identifies it") {
  for (double m : {0.3, 2.5}) {
    SloController c;  // m_hat starts at 1
    Plant plant{1.0 - 0.5 * m, m};  // target at duty 0.5
    double worst = 0;
    for (int k = 0; k < 40; ++k) {
      c.update(plant.latency(c.duty()));
      if (k >= 20) worst = std::max(worst, std::fabs(plant.latency(c.duty()) - 1.0));
    }
    INFO("true gain " << m << ", estimate " << c.gain_estimate());
    CHECK(worst < 0.02);
    CHECK(std::fabs(c.gain_estimate() - m) < 0.5 * std::fabs(1.0 - m));  // identified: half the error gone
  }
}

// Proportional control approaches the target geometrically (the error halves each period with
// a right gain estimate, g = 0.5): "back" means within 5% of it.
TEST_CASE("SloController: a load step is corrected within a few periods") {
  SloController c;
  Plant light{0.5, 0.4};  // under target even at full duty
  run(c, light, 10);
  CHECK(c.duty() == 1.0);
  Plant heavy{0.9, 0.4};  // now 1.3 at full duty: target at 0.25
  int periods = 0;
  while (heavy.latency(c.duty()) > 1.05 && periods < 50) c.update(heavy.latency(c.duty())), ++periods;
  CHECK(periods <= 6);
}

TEST_CASE("SloController: anti-windup at both limits, and saturation is reported") {
  SloController c;
  Plant impossible{1.5, 0.5};  // over the target even with training stopped
  run(c, impossible, 20);
  CHECK(c.duty() == Approx(0.05));
  CHECK(c.saturated());
  // Nothing wound up: once the load is gone the duty cycle starts rising at the next period
  // (at most max_rise a period) and the saturation clears.
  Plant easy{0.2, 0.5};
  c.update(easy.latency(c.duty()));
  CHECK(c.duty() == Approx(0.25));
  CHECK_FALSE(c.saturated());
  run(c, easy, 10);
  CHECK(c.duty() == 1.0);
  // And at the top limit, a long stretch under target does not delay the way down.
  c.update(1.5);
  CHECK(c.duty() < 0.85);
}

TEST_CASE("SloPolicy: idle inference leaves training ungated; active gates it at the duty cycle") {
  SloParams p;
  p.period_ns = kMs;
  p.control_period_ns = 100 * kMs;
  p.window_ns = 2 * kMs;
  p.idle_ns = 50 * kMs;
  SloPolicy policy(p);
  std::vector<FillerState> training{{3, 0, 0, true}};
  std::vector<Grant> grants{{9, 1}};
  OnlineClient online;
  online.activity_ns = 0;
  uint64_t t = 1000 * kMs;
  policy.step(t, {online}, training, grants);
  CHECK_FALSE(policy.active());
  CHECK(grants.empty());

  online.requests_open = 1;  // a request runs
  online.activity_ns = t;
  policy.step(t + kMs, {online}, training, grants);
  CHECK(policy.active());
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].id == 3);
  CHECK(grants[0].tokens_ns == static_cast<int64_t>(kMs));  // full duty: a period's worth
  // A balance never grows past the in-flight share.
  training[0].tokens_ns = static_cast<int64_t>(p.window_ns) - 100;
  policy.step(t + 2 * kMs, {online}, training, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 100);

  online.requests_open = 0;  // ended; active until idle_ns has passed
  policy.step(t + 40 * kMs, {online}, training, grants);
  CHECK(policy.active());
  policy.step(t + 60 * kMs, {online}, training, grants);
  CHECK_FALSE(policy.active());
}

TEST_CASE("SloPolicy: the balance reaches a whole period's grant even with a smaller in-flight window") {
  // The window bounds what is in flight (checked by the client); the balance bounds the rate.
  // Capped at the window (500 us against a 1 ms period), training could use at most half of
  // the GPU's time at full duty: 0.27-0.33 of Exclusive in e2e_slo_latency, at a p99 the
  // controller had room above.
  SloParams p;
  p.period_ns = kMs;
  p.control_period_ns = 100 * kMs;
  p.window_ns = kMs / 2;
  SloPolicy policy(p);
  std::vector<FillerState> training{{3, 0, 0, true}};
  std::vector<Grant> grants;
  OnlineClient online;
  uint64_t t = 1000 * kMs;
  online.requests_open = 1;
  online.activity_ns = t;
  policy.step(t, {online}, training, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == static_cast<int64_t>(kMs));
  training[0].tokens_ns = static_cast<int64_t>(kMs) - 100;  // unspent: only the rest is added
  policy.step(t + kMs, {online}, training, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 100);
  CHECK(policy.inflight_bound_ns() == kMs / 2);
}

TEST_CASE("SloPolicy: each control period uses only what was measured in it") {
  SloPolicy policy(ten_tick_periods());
  std::vector<Grant> grants;
  uint64_t t = 1000 * kMs;
  OnlineClient a, b;
  a.requests_open = b.requests_open = 1;
  a.activity_ns = b.activity_ns = t;
  a.slo_ns = 10 * kMs, b.slo_ns = 20 * kMs;
  a.latency_ns = 12 * kMs, b.latency_ns = 30 * kMs;  // b is the worse: 1.5 x its target
  a.samples = b.samples = 50;
  a.latency_seq = policy.control_seq();
  b.latency_seq = policy.control_seq() - 1;  // stale: from an earlier interval
  policy.step(t, {a, b}, {}, grants);
  policy.step(t + 10 * kMs, {a, b}, {}, grants);  // one control period
  REQUIRE(policy.history().size() == 1);
  CHECK(policy.history().back().latency_ms == Approx(12.0));  // b's stale figure ignored
  CHECK(policy.history().back().samples == 50);
  CHECK(policy.duty() < 1.0);
  double duty = policy.duty();
  // Nothing measured in the next interval (all stale now): the duty cycle holds.
  policy.step(t + 20 * kMs, {a, b}, {}, grants);
  CHECK(policy.duty() == duty);
  CHECK(policy.history().back().latency_ms == 0.0);
}

// The SM split is what training processes report of their own contexts (tandemd cannot see
// inside them): a process that claims one it does not have runs ungated only while the
// target holds, and is gated again from the first control period that misses it.
TEST_CASE("SloPolicy: a claimed SM split exempts training only while the target holds") {
  SplitGpu gpu(40);
  uint64_t t = 1000 * kMs;
  gpu.step(t);
  CHECK(gpu.policy.active());
  CHECK_FALSE(gpu.policy.gating());  // duty 1 and a split: not held back
  CHECK(gpu.grants.empty());
  // The claim was false: requests take twice their target beside the ungated training.
  gpu.online.latency_ns = 20 * kMs;
  gpu.online.latency_seq = gpu.policy.control_seq();
  int gated_after = -1;
  for (int k = 1; k <= 10 && gated_after < 0; ++k) {
    gpu.step(t + static_cast<uint64_t>(k) * kMs);
    if (gpu.policy.gating()) gated_after = k;
  }
  INFO("duty " << gpu.policy.duty());
  CHECK(gated_after == 10);  // the first control period's end
  CHECK(gpu.policy.duty() < 1.0);
  REQUIRE(gpu.grants.size() == 1);  // training runs on the duty cycle's tokens again
  CHECK(gpu.grants[0].tokens_ns < static_cast<int64_t>(kMs));
}

// Under an SM split the gate holds every training launch while a request is open: a period
// just over the target (the requests' own tail) must not switch it on for a few percent of
// duty cycle; a violation that lasts lowers the duty cycle on and gates training.
TEST_CASE("SloPolicy: under an SM split a small cut leaves training ungated, a lasting violation gates it") {
  SplitGpu gpu(20);
  gpu.online.latency_ns = 10500000;  // 1.05 x the target, every period
  uint64_t t = 1000 * kMs;
  int first_gated_period = -1;
  for (int k = 0; k <= 400 && first_gated_period < 0; ++k) {
    gpu.online.latency_seq = gpu.policy.control_seq();
    gpu.step(t);
    if (k == 10) {  // one control period: the duty cycle was cut, a little
      CHECK(gpu.policy.duty() < 1.0);
      CHECK(gpu.policy.duty() > 0.9);
      CHECK_FALSE(gpu.policy.gating());
      CHECK(gpu.grants.empty());
    }
    if (gpu.policy.gating()) first_gated_period = k / 10;
    t += kMs;
  }
  INFO("duty " << gpu.policy.duty());
  CHECK(first_gated_period > 1);
  CHECK(first_gated_period <= 5);  // 1.05x costs 0.025 of duty cycle a period at the initial gain
  CHECK(gpu.policy.duty() < 0.9);
  CHECK_FALSE(gpu.grants.empty());  // on the duty cycle's tokens
}

TEST_CASE("GpuScheduler, policy slo: who is gated, and how much may be in flight") {
  SchedulerParams params;
  params.policy = TANDEM_POLICY_SLO;
  params.slo.idle_ns = 50 * kMs;
  params.slo.window_ns = 500000;
  GpuScheduler gpu("00112233445566778899aabbccddeeff", params);
  REQUIRE(gpu.segment().ok());
  tandem_shm_header* shm = gpu.segment().shm();
  CHECK(shm->policy == TANDEM_POLICY_SLO);
  int online = gpu.segment().claim(300, TANDEM_ROLE_INFERENCE);
  int batch = gpu.segment().claim(400, TANDEM_ROLE_BATCH_INFERENCE);
  uint64_t t = 1000 * kMs;
  auto request = [&](bool open) {
    gpu.segment().page(online)->requests_open = open ? 1 : 0;
    gpu.segment().page(online)->request_activity_ns = t;
  };

  // No training: batch inference is the best-effort job. Idle inference leaves it ungated.
  gpu.tick(t += kMs);
  CHECK(shm->inference_slots == (1ull << online));
  CHECK(shm->slots[batch].gate == TANDEM_GATE_OPEN);
  request(true);
  gpu.tick(t += kMs);
  CHECK(gpu.slo().active());
  CHECK(shm->slots[batch].gate == TANDEM_GATE_TOKENS);
  CHECK(shm->slots[batch].inflight_bound_ns == 500000);  // full duty: the whole window
  CHECK(static_cast<int64_t>(shm->slots[batch].token_limit_ns - gpu.segment().page(batch)->tokens_taken_ns) > 0);
  CHECK(shm->slots[online].requests_open == 1);  // published for the gated processes to read

  // Training arrives: it becomes the best-effort job; batch inference fills its bubbles,
  // within the same window.
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  gpu.tick(t += kMs);
  CHECK(shm->slots[train].gate == TANDEM_GATE_TOKENS);
  CHECK(shm->slots[train].inflight_bound_ns == 500000);
  CHECK(shm->slots[batch].gate == TANDEM_GATE_TOKENS);
  CHECK(shm->slots[batch].inflight_bound_ns == 0);  // the fill policy's grants bound it

  // The request ended long ago: training runs ungated again, with no bound.
  request(false);
  t += 60 * kMs;
  gpu.tick(t);
  CHECK_FALSE(gpu.slo().active());
  CHECK(shm->slots[train].gate == TANDEM_GATE_OPEN);
  CHECK(shm->slots[train].inflight_bound_ns == 0);
}
