// Policy slo's live SM partition (partition_controller.h, slo_policy.h, gpu_scheduler.h) and
// the busy server's lifted hold: the controller on a plant of latency against partition, the
// policy's outputs, and what the daemon publishes in the training process's slot.
#include <catch2/catch.hpp>

#include "gpu_scheduler.h"
#include "partition_controller.h"
#include "slo_policy.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;
const uint8_t kLevels[TANDEM_LIVE_PARTITIONS] = {25, 50, 70, 85};

// Inference needs half the SMs: latency over target `base` while training's partition leaves
// them, rising by `slope` per percent of oversubscription beyond.
struct Plant {
  double base = 0.8, slope = 0.02;
  double y(uint32_t pct) const { return pct <= 50 ? base : base + slope * (pct - 50); }
};

// Runs `periods` control periods; returns how many were spent at each percentage.
std::vector<int> run(PartitionController& c, const Plant& p, int periods) {
  std::vector<int> at(101, 0);
  for (int k = 0; k < periods; ++k) {
    ++at[c.level_pct()];
    c.update(p.y(c.level_pct()));
  }
  return at;
}

SloParams ten_tick_periods() {
  SloParams p;
  p.period_ns = kMs;
  p.control_period_ns = 10 * kMs;
  return p;
}

// A policy with one training client and one online client (a 10 ms target), 1 ms ticks.
struct OneEach {
  SloPolicy policy;
  std::vector<FillerState> training{{3, 0, 0, true}};
  std::vector<Grant> grants;
  OnlineClient online;
  uint64_t t = 1000 * kMs;
  explicit OneEach(SloParams p = ten_tick_periods()) : policy(p) { online.slo_ns = 10 * kMs; }
};
}  // namespace

TEST_CASE("PartitionController: finds the largest partition that holds the target and stays there") {
  PartitionController c;
  REQUIRE(c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0));
  CHECK(c.levels() == 5);  // four partitions and every SM
  CHECK(c.level_pct() == 25);  // starts at the smallest
  std::vector<int> at = run(c, Plant{}, 40);
  INFO("periods at 25: " << at[25] << ", at 50: " << at[50] << ", at 70: " << at[70]);
  // 50% after 3 periods; 70% (1.2 x the target) tried 3 periods later, left at once, and tried
  // again after a back-off of 5, 10, 20 periods: 3 periods over the target in 40.
  CHECK(at[25] == 3);
  CHECK(at[70] == 3);
  CHECK(at[50] == 34);
  CHECK(at[85] == 0);
  CHECK(c.remembered(2) > 1.0);
  // Inference needs less: 70% fits too (ratio 0.8 up to 70, over above): found.
  PartitionController d;
  d.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  auto y = [](uint32_t pct) { return pct <= 70 ? 0.8 : 0.8 + 0.02 * (pct - 70); };
  for (int k = 0; k < 40; ++k) d.update(y(d.level_pct()));
  CHECK(d.level_pct() == 70);
}

TEST_CASE("PartitionController: a level held leaves on two periods of three, a probe on one") {
  PartitionController c;
  c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  for (int k = 0; k < 3; ++k) c.update(0.5);  // held at 25: steps up
  REQUIRE(c.level_pct() == 50);
  c.update(1.06);  // the probe's first period over the target: back at once
  CHECK(c.level_pct() == 25);
  for (int k = 0; k < 5; ++k) c.update(0.5);  // the back-off
  REQUIRE(c.level_pct() == 50);
  for (int k = 0; k < 3; ++k) c.update(0.9);  // holds 50: now a level held (70's probe is barred above 0.85)
  c.update(1.06);
  CHECK(c.level_pct() == 50);  // one period of three over: stays
  c.update(1.06);
  CHECK(c.level_pct() == 25);  // two of three: leaves
}

TEST_CASE("PartitionController: one period's burst does not move it, a lasting violation does") {
  PartitionController c;
  c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  Plant p;
  run(c, p, 20);  // settled at 50, 70% known to be over the target
  // Poisson bursts: every seventh period 2.5 x the target, whatever training does: never below 50.
  for (int k = 0; k < 70; ++k) {
    c.update(k % 7 == 3 ? 2.5 : p.y(c.level_pct()));
    CHECK(c.level_pct() >= 50);
  }
  run(c, p, 3);
  REQUIRE(c.level_pct() == 50);
  // Inference grows: 50% is now over the target too, every period: down within two.
  p.base = 1.1;
  c.update(p.y(c.level_pct()));
  c.update(p.y(c.level_pct()));
  CHECK(c.level_pct() == 25);
}

TEST_CASE("PartitionController: a level once over the target is tried again, and kept once the load fell") {
  PartitionController c;
  c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  Plant p;
  run(c, p, 20);
  REQUIRE(c.remembered(2) > 1.0);
  // Inference's load halves: every level fits now and latency falls well below.
  p.base = 0.4, p.slope = 0;
  run(c, p, 30);
  CHECK(c.level_pct() == 100);  // climbed back through 70 and 85 to every SM, once 70's back-off ran out
}

TEST_CASE("PartitionController: a larger partition that slows every request is left, though the period's p99 holds") {
  PartitionController c;
  c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  // Each period's slowest request stays at 0.7 of the target whatever the partition; the mean
  // latency rises 17% once training's partition overlaps inference's half of the SMs.
  auto mean_ns = [](uint32_t pct) { return pct <= 50 ? 5e6 : 5.85e6; };
  std::vector<int> at(101, 0);
  for (int k = 0; k < 40; ++k) {
    ++at[c.level_pct()];
    c.update(0.7, mean_ns(c.level_pct()));
  }
  INFO("periods at 50: " << at[50] << ", at 70: " << at[70] << ", at 85: " << at[85]);
  CHECK(at[85] == 0);
  // Tried after each back-off and left after its third period (the first period's running
  // mean still holds the level below's requests; the slowdown needs two periods' means).
  CHECK(at[70] <= 9);
  CHECK(at[50] >= 28);
  // Without the mean (an older client), the p99 alone lets it climb to every SM.
  PartitionController blind;
  blind.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  for (int k = 0; k < 40; ++k) blind.update(0.7);
  CHECK(blind.level_pct() == 100);
}

TEST_CASE("PartitionController: over the target at the speed of the level below is inference's own tail: it stays") {
  PartitionController c;
  c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  // Every third period a burst (1.5 x the target) at any partition up to 50%; the mean latency
  // rises only beyond 50% (training's partition then overlaps inference's SMs).
  auto mean_ns = [](uint32_t pct) { return pct <= 50 ? 5e6 : 5.85e6; };
  // The start's burst takes it to 25%, where it learns the requests' speed without overlap,
  // then back to 50%.
  c.update(1.2, mean_ns(c.level_pct()));
  c.update(1.2, mean_ns(c.level_pct()));
  REQUIRE(c.level_pct() == 25);
  for (int k = 0; k < 30; ++k) c.update(0.8, mean_ns(c.level_pct()));
  REQUIRE(c.level_pct() == 50);
  for (int k = 0; k < 30; ++k) {
    c.update(k % 3 == 0 ? 1.5 : 1.05, mean_ns(c.level_pct()));  // over the target two periods of three
    CHECK(c.level_pct() >= 50);
  }
  // Without the mean, the same periods take it down.
  PartitionController blind;
  blind.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  for (int k = 0; k < 6; ++k) blind.update(k % 3 == 0 ? 1.5 : 1.05);
  CHECK(blind.level_pct() == 25);
}

TEST_CASE("PartitionController: the requests' widest kernel sets the start and a ceiling") {
  PartitionController c;
  c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  Plant holds;
  holds.base = 0.5, holds.slope = 0;  // the target held at every level: only the ceiling stops it
  c.fit(0);  // not known yet: the smallest, no ceiling
  CHECK(c.level_pct() == 25);
  CHECK(c.ceiling() == 4);
  c.fit(50);  // kernels of half the GPU's SMs: training's start and ceiling are the other half
  CHECK(c.level_pct() == 50);
  CHECK(c.ceiling() == 1);
  std::vector<int> at = run(c, holds, 40);
  CHECK(at[50] == 40);  // never above, though every level would hold the target
  // Narrower kernels leave more: 70% (70 + 20 <= 100), not 85%; climbed to on measurements.
  c.fit(20);
  CHECK(c.ceiling() == 2);
  at = run(c, holds, 10);
  CHECK(c.level_pct() == 70);
  // Wider ones take it down at once, not as a failure (no back-off when they narrow again).
  c.fit(80);
  CHECK(c.level_pct() == 25);
  c.fit(50);
  CHECK(c.level_pct() == 25);  // the start is set once; from here the measurements climb
  run(c, holds, 3);
  CHECK(c.level_pct() == 50);
  // As wide as the GPU: no room to leave, the measurements alone (to every SM here).
  c.fit(100);
  run(c, holds, 20);
  CHECK(c.level_pct() == 100);
  // Over the target at the start it predicted: the measurements still take it lower.
  PartitionController d;
  d.configure(kLevels, TANDEM_LIVE_PARTITIONS, 0);
  d.fit(50);
  REQUIRE(d.level_pct() == 50);
  for (int k = 0; k < 3; ++k) d.update(1.5);
  CHECK(d.level_pct() == 25);
  // A fixed level is the operator's: no start, no ceiling.
  PartitionController f;
  f.configure(kLevels, TANDEM_LIVE_PARTITIONS, 85);
  f.fit(50);
  CHECK(f.level_pct() == 85);
}

TEST_CASE("PartitionController: a fixed level never moves; unknown levels hold nothing") {
  PartitionController c;
  REQUIRE(c.configure(kLevels, TANDEM_LIVE_PARTITIONS, 70));
  Plant p;
  p.base = 1.5;
  run(c, p, 10);
  CHECK(c.level_pct() == 70);
  const uint8_t none[TANDEM_LIVE_PARTITIONS] = {};
  PartitionController d;
  CHECK_FALSE(d.configure(none, TANDEM_LIVE_PARTITIONS, 0));
  CHECK(d.level_pct() == 100);
}

TEST_CASE("SloPolicy, live partitions: not held during requests while a partition holds; duty cycle below the smallest") {
  OneEach g;
  auto& [policy, training, grants, online, t] = g;
  online.samples = 20;
  int tick = 0;
  auto step = [&](double y) {
    online.requests_open = ++tick % 2;  // a request open half the time: not a busy server
    online.activity_ns = t;
    online.latency_ns = static_cast<uint64_t>(y * 10 * kMs);
    online.latency_seq = policy.control_seq();
    policy.step(t, {online}, training, grants, false, kLevels);
    t += kMs;
  };
  step(0.9);
  CHECK(policy.live());
  CHECK(policy.partition_pct() == 25);  // the smallest first
  CHECK(policy.gating());            // bounded between requests...
  CHECK(policy.requests_unheld());   // ...but not held during them: the partition is
  // Inference alone is now over the target: the partition falls to its smallest, then the duty
  // cycle, and below 0.9 training is held during requests again.
  int held_after = -1;
  for (int k = 1; k <= 200 && held_after < 0; ++k) {
    step(1.5);
    if (!policy.requests_unheld()) held_after = k;
  }
  CHECK(policy.partition_pct() == 25);
  CHECK(policy.duty() < 0.9);
  CHECK(held_after > 0);
  // Without partitions (none announced) the policy is not live and holds training as before.
  SloPolicy plain(ten_tick_periods());
  online.latency_ns = 9 * kMs;
  plain.step(t, {online}, training, grants, false, nullptr);
  CHECK_FALSE(plain.live());
  CHECK(plain.partition_pct() == 0);
  CHECK_FALSE(plain.requests_unheld());
  // TANDEM_SLO_PARTITION=off: not live even with partitions.
  SloParams off = ten_tick_periods();
  off.live_partition = 0;
  SloPolicy no(off);
  no.step(t, {online}, training, grants, false, kLevels);
  CHECK_FALSE(no.live());
}

TEST_CASE("SloPolicy, a busy server: requests back to back do not hold training for good") {
  OneEach g;
  auto& [policy, training, grants, online, t] = g;
  // Half the time a request open (Poisson at half load): held during requests, as before.
  for (int k = 0; k < 40; ++k, t += kMs) {
    online.requests_open = k % 2;
    online.activity_ns = t;
    policy.step(t, {online}, training, grants);
  }
  CHECK(policy.gating());
  CHECK(policy.busy_fraction() == Approx(0.5).margin(0.11));
  CHECK_FALSE(policy.requests_unheld());
  // One busy period (a Poisson burst) between quieter ones: still held.
  for (int k = 0; k < 30; ++k, t += kMs) {
    online.requests_open = k < 10 || k % 2;
    online.activity_ns = t;
    policy.step(t, {online}, training, grants);
    CHECK_FALSE(policy.requests_unheld());
  }
  // A closed-loop client: a request always open. Once three control periods were busy,
  // training runs beside the requests, bounded by its tokens and window.
  int unheld_at = -1;
  for (int k = 0; k < 60; ++k, t += kMs) {
    online.requests_open = 1;
    online.activity_ns = t;
    policy.step(t, {online}, training, grants);
    if (policy.requests_unheld() && unheld_at < 0) unheld_at = k;
  }
  INFO("unheld after " << unheld_at << " ticks");
  CHECK(unheld_at >= 20);
  CHECK(unheld_at <= 40);
  CHECK(policy.gating());  // still gated: tokens and the in-flight window
  CHECK(policy.busy_fraction() > 0.9);
}

TEST_CASE("GpuScheduler, live partitions: the slot says the partition while a request runs, none between") {
  SchedulerParams params;
  params.policy = TANDEM_POLICY_SLO;
  params.slo.window_ns = 500000;
  GpuScheduler gpu("00112233445566778899aabbccddeeff", params);
  REQUIRE(gpu.segment().ok());
  tandem_shm_header* shm = gpu.segment().shm();
  int online = gpu.segment().claim(300, TANDEM_ROLE_INFERENCE);
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  tandem_client_page* tp = gpu.segment().page(train);
  const uint32_t all_levels = TANDEM_TRAINING_LIVE_MASK;
  tp->training_flags = TANDEM_TRAINING_MPS | all_levels;
  gpu.segment().page(online)->slo_us = 10000;
  uint64_t t = 1000 * kMs;
  auto request = [&](bool open) {
    gpu.segment().page(online)->requests_open = open ? 1 : 0;
    gpu.segment().page(online)->request_activity_ns = t;
  };
  request(true);
  gpu.tick(t += kMs);
  CHECK(gpu.slo().live());
  CHECK(shm->slots[train].live_partition == 25);
  // On its partition, the in-flight bound of between requests scaled to its SMs (3 windows, 25%).
  CHECK(shm->slots[train].inflight_bound_ns == 3 * 500000 / 4);
  CHECK(shm->requests_unheld == 1);
  request(false);
  gpu.tick(t += kMs);
  CHECK(shm->slots[train].live_partition == 0);  // between requests: every SM...
  CHECK(shm->slots[train].inflight_bound_ns == 3 * 500000);  // ...with the in-flight bound (3 windows under MPS)
  CHECK(shm->slots[train].gate == TANDEM_GATE_TOKENS);
  // Not an MPS client (time slicing): no live partition, held during requests as before.
  tp->training_flags = all_levels;
  request(true);
  gpu.tick(t += kMs);
  CHECK_FALSE(gpu.slo().live());
  CHECK(shm->slots[train].live_partition == 0);
  CHECK(shm->requests_unheld == 0);
  // Two training processes holding different partitions: not live (one partition for all).
  tp->training_flags = TANDEM_TRAINING_MPS | all_levels;
  int other = gpu.segment().claim(600, TANDEM_ROLE_TRAINING);
  gpu.segment().page(other)->training_flags = TANDEM_TRAINING_MPS | TANDEM_TRAINING_LIVE(1);
  gpu.tick(t += kMs);
  CHECK_FALSE(gpu.slo().live());
  gpu.segment().page(other)->training_flags = TANDEM_TRAINING_MPS | all_levels;
  gpu.tick(t += kMs);
  CHECK(gpu.slo().live());
  CHECK(shm->slots[other].live_partition == 25);
  // The inference process's last request's widest kernel: 66 blocks on a GPU of 132 SMs leaves
  // training half of them from the next step on.
  gpu.segment().page(online)->request_blocks = 66;
  gpu.segment().page(online)->device_sms = 132;
  gpu.tick(t += kMs);
  CHECK(shm->slots[train].live_partition == 50);
  CHECK(shm->slots[other].live_partition == 50);
}

namespace {
// A GPU under policy slo with one MPS training process holding every live partition and one
// online inference process whose page the test writes (as a hostile client may).
struct LiveGpu {
  static SchedulerParams params() {
    SchedulerParams p;
    p.policy = TANDEM_POLICY_SLO;
    p.slo.window_ns = 500000;
    return p;
  }
  GpuScheduler gpu{"00112233445566778899aabbccddeeff", params()};
  tandem_shm_header* shm = gpu.segment().shm();
  int online = gpu.segment().claim(300, TANDEM_ROLE_INFERENCE);
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  uint64_t t = 1000 * kMs;
  LiveGpu() { gpu.segment().page(train)->training_flags = TANDEM_TRAINING_MPS | TANDEM_TRAINING_LIVE_MASK; }
  tandem_client_page* page() { return gpu.segment().page(online); }
  // Training's share of the GPU the slot gives it now: its duty cycle on its partition's SMs.
  double share() const {
    uint32_t pct = shm->slots[train].live_partition;
    return shm->training_duty_ppm / 1e6 * (pct ? pct / 100.0 : 1.0);
  }
};
}  // namespace

// docs/security.md: a client trusted with the inference role may hold training down to the
// floor, min_duty (5%) of the GPU, and no further. Reporting latencies 10x its target with a
// request always open, it drove the duty cycle to 0.05 *and* pinned the partition at 25%:
// training had 0.0125 of the GPU (0.02 of its speed alone, measured).
TEST_CASE("SloPolicy, one floor: false latencies with a live partition leave training the floor") {
  LiveGpu g;
  const double floor = LiveGpu::params().slo.controller.min_duty;
  const uint64_t start = g.t;
  uint64_t granted_before = 0, granted_at = 0;
  for (g.t += kMs; g.t <= start + 8000 * kMs; g.t += kMs) {
    tandem_client_page* p = g.page();
    p->requests_open = 1;
    p->slo_us = 10000;
    p->request_activity_ns = g.t;  // refreshed: never stuck, a busy server
    p->latency_seq = g.shm->control_seq;
    p->latency_ns = 100 * kMs;  // 10 x its target
    p->latency_samples = 20;
    // Training spends every token it was given (what it may run is what was granted).
    g.gpu.segment().page(g.train)->tokens_taken_ns = g.shm->slots[g.train].token_limit_ns;
    g.gpu.tick(g.t);
    if (g.t == start + 7000 * kMs) granted_before = g.shm->slots[g.train].granted_ns, granted_at = g.t;
    if (g.t > start + 6000 * kMs) {
      INFO("t " << (g.t - start) / kMs << " ms: duty " << g.shm->training_duty_ppm << " ppm, partition "
                << g.shm->slots[g.train].live_partition);
      CHECK(g.share() >= floor - 1e-6);
    }
  }
  REQUIRE(g.gpu.slo().duty() == Approx(floor));  // the controller at its minimum...
  CHECK(g.gpu.slo().live());
  CHECK(g.shm->requests_unheld == 1);
  CHECK(g.shm->slots[g.train].live_partition == 25);  // ...with the smallest partition in force
  CHECK(g.gpu.slo().training_duty() == Approx(floor * 100 / 25));  // so training is given 0.2
  // What the grants gave over the last second, on a quarter of the SMs: the floor.
  double granted = static_cast<double>(g.shm->slots[g.train].granted_ns - granted_before);
  double effective = granted / static_cast<double>(g.t - kMs - granted_at) * 0.25;
  INFO("granted " << granted / 1e6 << " ms over the last second: " << effective << " of the GPU");
  CHECK(effective >= floor * 0.98);
  // The in-flight bound on the partition: the floor's window, not a quarter of it.
  CHECK(g.shm->slots[g.train].inflight_bound_ns == static_cast<uint64_t>(floor * 500000 * 4));
  // Between requests training has every SM again, at the controller's duty cycle.
  g.page()->requests_open = 0;
  g.page()->request_activity_ns = g.t;
  g.gpu.tick(g.t);
  CHECK(g.shm->slots[g.train].live_partition == 0);
  CHECK(g.gpu.slo().training_duty() == Approx(floor));
  CHECK(g.share() >= floor - 1e-6);
}

TEST_CASE("SloPolicy, one floor: when the target is reachable the partition's duty cycle is the controller's") {
  OneEach g;
  auto& [policy, training, grants, online, t] = g;
  for (int k = 0; k < 50; ++k, t += kMs) {
    online.requests_open = k % 2;
    online.activity_ns = t;
    policy.step(t, {online}, training, grants, false, kLevels);
    CHECK(policy.training_duty() == policy.duty());
    CHECK(policy.applied_partition_pct() == (k % 2 ? policy.partition_pct() : 0u));
  }
  CHECK(policy.duty() == 1.0);
  CHECK(policy.partition_pct() == 25);
}

// A request left open (its client begins and ends none) with a target of 5 s is stuck only
// after 10 s; the busy-server rule and the holds' floor lift its time hold within about a
// second. Its pin on the partition goes on the same schedule, not the stuck rule's.
TEST_CASE("SloPolicy, one floor: a request left open pins the partition about a second, not 10 s") {
  LiveGpu g;
  g.page()->requests_open = 1;
  g.page()->slo_us = 5000000;
  g.page()->request_activity_ns = g.t;
  const uint64_t start = g.t;
  uint64_t lifted_after = 0;
  for (g.t += kMs; g.t <= start + 3000 * kMs; g.t += kMs) {
    g.gpu.tick(g.t);
    if (!lifted_after && g.shm->slots[g.train].live_partition == 0) lifted_after = g.t - start;
    if (lifted_after) CHECK(g.shm->slots[g.train].live_partition == 0);  // for good
  }
  INFO("partition lifted after " << lifted_after / kMs << " ms");
  CHECK(lifted_after >= 900 * kMs);  // a long request keeps it its first second...
  CHECK(lifted_after <= 1001 * kMs);  // ...and no longer (before: 10 s, the stuck rule's)
  CHECK(g.gpu.request_holds().stuck() == 0);  // not stuck yet: the time hold's schedule, not that one
  // Its client begins or ends a request again: the partition is back.
  g.page()->request_activity_ns = g.t;
  g.gpu.tick(g.t += kMs);
  CHECK(g.shm->slots[g.train].live_partition == 25);
  // A server with requests back to back begins and ends them all the time: it keeps its
  // partition beyond the second.
  for (int k = 0; k < 3000; ++k) {
    g.page()->request_activity_ns = g.t;
    g.gpu.tick(g.t += kMs);
  }
  CHECK(g.shm->slots[g.train].live_partition == 25);
}

TEST_CASE("live_levels: the percentages a training process's flags name") {
  uint8_t pcts[TANDEM_LIVE_PARTITIONS];
  CHECK(live_levels(TANDEM_TRAINING_LIVE(1) | TANDEM_TRAINING_LIVE(3) | TANDEM_TRAINING_MPS, pcts) == 2);
  CHECK(pcts[0] == 50);
  CHECK(pcts[1] == 85);
  CHECK(pcts[2] == 0);
  CHECK(live_levels(TANDEM_TRAINING_COLLECTIVES_HELD, pcts) == 0);
}
