// The latency model of policy slo (HARLI's predictor): recursive least squares on a known
// linear plant, its readiness and solving for a duty cycle, tracking a change, and the
// policy's cut of the duty cycle at a burst's onset, before the control period ends.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "latency_model.h"
#include "slo_controller.h"
#include "slo_policy.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;

// y = a + b * duty + c * load: normalized latency of inference beside training.
struct LinearPlant {
  double a, b, c;
  double y(double duty, double load) const { return a + b * duty + c * load; }
};
}  // namespace

TEST_CASE("LatencyModel: learns a linear plant from noisy observations") {
  LinearPlant plant{0.4, 0.8, 1.5};
  LatencyModel m;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> duty(0.05, 1.0), load(0.05, 0.5);
  std::normal_distribution<double> noise(0.0, 0.02);
  for (int i = 0; i < 200; ++i) {
    double d = duty(rng), l = load(rng);
    m.observe(d, l, plant.y(d, l) + noise(rng));
  }
  REQUIRE(m.ready());
  CHECK(m.theta()[0] == Approx(0.4).margin(0.05));
  CHECK(m.theta()[1] == Approx(0.8).margin(0.05));
  CHECK(m.theta()[2] == Approx(1.5).margin(0.15));
  CHECK(m.predict(0.5, 0.3) == Approx(plant.y(0.5, 0.3)).margin(0.03));
  double d = 0;
  REQUIRE(m.duty_for(1.0, 0.2, &d));
  CHECK(d == Approx((1.0 - 0.4 - 1.5 * 0.2) / 0.8).margin(0.05));  // 0.375
}

TEST_CASE("LatencyModel: no prediction before it has seen the duty cycle and the load vary") {
  LatencyModel m;
  double d = 0;
  for (int i = 0; i < 20; ++i) m.observe(1.0, 0.1 + 0.01 * (i % 3), 0.9);  // duty never moved
  CHECK_FALSE(m.ready());
  CHECK_FALSE(m.duty_for(1.0, 0.1, &d));
  // Training without effect on latency: nothing to cut, whatever the fit.
  LatencyModel flat;
  for (int i = 0; i < 40; ++i) flat.observe(0.2 + 0.02 * i, 0.1 + 0.01 * (i % 5), 0.7 + 0.5 * (0.01 * (i % 5)));
  REQUIRE(flat.ready());
  CHECK_FALSE(flat.duty_for(1.0, 0.1, &d));
}

TEST_CASE("LatencyModel: forgets an old plant and follows a new one") {
  LatencyModel m;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> duty(0.1, 1.0), load(0.05, 0.4);
  LinearPlant before{0.3, 0.6, 1.0}, after{0.6, 0.6, 1.0};  // inference became slower on its own
  for (int i = 0; i < 100; ++i) {
    double d = duty(rng), l = load(rng);
    m.observe(d, l, before.y(d, l));
  }
  // Forgetting 0.97: after 150 periods the old plant weighs 0.97^150 = 1% of the fit.
  for (int i = 0; i < 150; ++i) {
    double d = duty(rng), l = load(rng);
    m.observe(d, l, after.y(d, l));
  }
  CHECK(m.predict(0.5, 0.2) == Approx(after.y(0.5, 0.2)).margin(0.03));
}

TEST_CASE("SloController: a cap lowers the duty cycle at once, never below the minimum") {
  SloController c;
  c.cap(0.4);
  CHECK(c.duty() == Approx(0.4));
  c.cap(0.9);  // only ever down
  CHECK(c.duty() == Approx(0.4));
  c.cap(-1.0);
  CHECK(c.duty() == Approx(0.05));
}

// The policy on a plant whose latency follows training's mean duty cycle and inference's load
// over each control period. Trained on alternating light and moderate load, it meets a burst:
// the model cuts training back a quarter of a period in, before the period's measurement.
TEST_CASE("SloPolicy: the latency model cuts training at a burst's onset, ahead of the feedback") {
  SloParams p;
  p.predict = true;  // TANDEM_SLO_PREDICT=1
  p.period_ns = kMs;
  p.control_period_ns = 100 * kMs;
  SloPolicy policy(p);
  LinearPlant plant{0.3, 0.6, 1.0};  // target held at duty 1 under load 0.1, at 0.67 under 0.3
  std::vector<FillerState> training{{1, 0, 0, true}};
  std::vector<Grant> grants;
  OnlineClient c;
  c.id = 5;
  c.generation = 1;
  c.request_ns = 4 * kMs;
  c.slo_ns = 10 * kMs;
  c.requests_open = 1;
  uint64_t t = 1000 * kMs;
  double requests = 0;
  // One control period at `load`; returns the duty cycle seen after `stop_at` ticks (0: all).
  bool spatial = false;
  auto period = [&](double load, int stop_at) {
    double duty_sum = 0;
    int ticks = 0;
    for (int k = 1; k <= 100; ++k) {
      t += kMs;
      requests += load * static_cast<double>(kMs) / static_cast<double>(c.request_ns);
      c.requests = static_cast<uint64_t>(requests);
      c.activity_ns = t;
      if (k == 100) {  // the period's measurement, published before the daemon's control step
        double y = plant.y(duty_sum / ticks, load);
        c.latency_ns = static_cast<uint64_t>(y * static_cast<double>(c.slo_ns));
        c.latency_seq = policy.control_seq();
        c.samples = 30;
      }
      policy.step(t, {c}, training, grants, spatial);
      duty_sum += policy.duty(), ++ticks;
      if (k == stop_at) return policy.duty();
    }
    return policy.duty();
  };
  policy.step(t, {c}, training, grants);
  for (int i = 0; i < 30; ++i) period(i % 4 < 2 ? 0.1 : 0.3, 0);
  const LatencyModel* m = policy.model(5);
  REQUIRE(m != nullptr);
  REQUIRE(m->ready());
  double before = policy.duty();
  uint64_t cuts = policy.predicted_cuts();
  // The burst: load 0.6, where the target needs duty (1 - 0.3 - 0.6) / 0.6 = 0.17.
  double a_third_in = period(0.6, 35);
  INFO("duty before the burst " << before << ", a third into it " << a_third_in);
  CHECK(policy.predicted_cuts() > cuts);
  CHECK(a_third_in < 0.45);  // cut once, on the load seen a quarter in (~0.5); the feedback does the rest
  CHECK(a_third_in < before - 0.2);
  // Under an MPS SM split the model does not cut: the feedback alone moves the duty cycle.
  for (int i = 0; i < 10; ++i) period(0.1, 0);
  spatial = true;
  cuts = policy.predicted_cuts();
  before = policy.duty();
  CHECK(period(0.6, 35) == before);
  CHECK(policy.predicted_cuts() == cuts);
}
