// Policy fill with online inference (TANDEM_FILL_ONLINE_HOLD): a request may hold training so
// that it runs at once; holds made while training computes are bounded to the setting's part of
// each second, after which requests are sent to bubbles; a request whose bubble is due within
// the hold horizon waits for it; a hold's quiet is not learned as a bubble; 0 turns holds off
// (SpecInF's pull-and-execute only).
#include <catch2/catch.hpp>

#include "gate.h"
#include "gpu_scheduler.h"
#include "hold_horizon.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;

struct FillGpu {
  GpuScheduler gpu;
  tandem_shm_header* shm = gpu.segment().shm();
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  int online = gpu.segment().claim(300, TANDEM_ROLE_INFERENCE);
  uint64_t t = 1000 * kMs;

  explicit FillGpu(double hold) : gpu("00112233445566778899aabbccddeeff", params(hold)) {}
  static SchedulerParams params(double hold) {
    SchedulerParams p;
    p.policy = TANDEM_POLICY_FILL;
    p.fill.online_hold = hold;
    return p;
  }
  tandem_client_page* page() { return gpu.segment().page(online); }
  void request(bool open) {
    page()->requests_open = open ? 1 : 0;
    page()->slo_us = 100000;
    page()->request_activity_ns = t;
  }
  // One tick of a training process that computes (launches) or waits (a bubble).
  void tick(bool computing) {
    if (computing) gpu.segment().page(train)->launches += 1;
    gpu.tick(t += kMs);
  }
  bool training_held() const {
    return shm->slots[train].gate == TANDEM_GATE_TOKENS && shm->slots[online].requests_open > 0 &&
           shm->requests_unheld == 0;
  }
};
}  // namespace

TEST_CASE("fill online hold: a request holds training at once, and training's queue is bounded meanwhile") {
  FillGpu g(0.05);
  for (int i = 0; i < 5; ++i) g.tick(true);
  REQUIRE(g.gpu.gpu_phase() == GpuPhase::busy);
  CHECK(g.shm->requests_unheld == 0);  // a request may run at once
  CHECK(g.shm->slots[g.train].inflight_bound_ns == FillParams{}.max_inflight_ns);  // online inference registered
  CHECK(g.shm->slots[g.train].gate == TANDEM_GATE_OPEN);
  g.request(true);
  g.tick(true);
  CHECK(g.training_held());
  for (int i = 0; i < 5; ++i) g.tick(false);  // training's launches wait: quiet, but no bubble
  CHECK(g.gpu.gpu_phase() == GpuPhase::busy);
  CHECK(g.shm->gpu_phase == TANDEM_GPU_BUSY);
  g.request(false);
  g.tick(false);
  CHECK(g.shm->slots[g.train].gate == TANDEM_GATE_OPEN);
  CHECK(g.shm->slots[g.online].requests_open == 0);
}

TEST_CASE("fill online hold: holds while training computes take at most the setting's part of each second") {
  FillGpu g(0.05);
  const uint64_t first = g.t + kMs;  // the holds' windows count from the first tick
  for (int i = 0; i < 5; ++i) g.tick(true);
  uint64_t held[3] = {}, sent_to_bubbles = 0;
  for (int k = 0; k < 2500; ++k) {  // seconds of a request always open while training computes
    g.request(true);
    g.tick(true);
    uint64_t window = (g.t - first) / (1000 * kMs);
    if (window < 3) held[window] += g.training_held();
    sent_to_bubbles += g.shm->requests_unheld;
    if (k == 1500) CHECK(g.shm->slots[g.train].gate == TANDEM_GATE_OPEN);  // once spent, training runs beside it
  }
  INFO("held " << held[0] << ", " << held[1] << ", " << held[2] << " ms of three seconds");
  for (uint64_t ms : held) CHECK(ms <= 51);
  CHECK(held[1] >= 45);  // a whole second: holds are a part of it, not off
  CHECK(sent_to_bubbles >= 2500 - 3 * 51);
}

TEST_CASE("fill online hold: holds inside a bubble cost training nothing and are not counted") {
  FillGpu g(0.05);
  auto iteration = [&](int open_ticks) {  // 20 ms computing, then a 10 ms bubble
    for (int i = 0; i < 20; ++i) g.tick(true);
    uint64_t held = 0;
    for (int i = 0; i < 10; ++i) {
      g.request(i >= 1 && i <= open_ticks);  // from the bubble's second ms: tandemd has seen it
      g.tick(false);
      held += g.training_held();
    }
    return held;
  };
  for (int i = 0; i < 4; ++i) iteration(0);  // the bubbles learned
  uint64_t held = 0;
  for (int i = 0; i < 30; ++i) held += iteration(4);  // a request in each bubble's ms 2 to 5
  CHECK(held >= 30 * 3);  // 90 ms of holds in 900, far over the 5%: none charged
}

TEST_CASE("fill online hold: 0 turns holds off; no training, nothing to hold") {
  FillGpu off(0);
  for (int i = 0; i < 5; ++i) off.tick(true);
  off.request(true);
  off.tick(true);
  CHECK_FALSE(off.training_held());
  CHECK(off.shm->requests_unheld == 1);  // requests wait for a bubble
  CHECK(off.shm->slots[off.train].gate == TANDEM_GATE_OPEN);
  CHECK(off.shm->slots[off.train].inflight_bound_ns == 0);

  FillGpu alone(0.05);
  alone.gpu.segment().release(alone.train);
  alone.request(true);
  alone.tick(false);
  CHECK_FALSE(alone.training_held());
  CHECK(alone.shm->requests_unheld == 1);
}

TEST_CASE("fill online hold: a batch filler yields to a request also once the holds are spent") {
  // Online before offline (SpecInF): a request that waited for a bubble and ran there beside a
  // filler's kernels took twice as long (p50 32-35 ms against 15-17 without the filler).
  FillGpu g(0.05);
  int filler = g.gpu.segment().claim(400, TANDEM_ROLE_BATCH_INFERENCE);
  for (int i = 0; i < 5; ++i) g.tick(true);
  for (int k = 0; k < 200; ++k) {  // a request always open while training computes: the part runs out
    g.request(true);
    g.tick(true);
  }
  REQUIRE(g.shm->requests_unheld == 1);
  CHECK(g.shm->slots[g.train].gate == TANDEM_GATE_OPEN);  // training is no longer held
  CHECK(g.shm->slots[filler].gate == TANDEM_GATE_TOKENS);
  CHECK(g.shm->slots[g.online].requests_open == 1);      // published for the filler's gate
  // The gate of a process reads it so: under fill a filler waits for the request, under slo a
  // busy server's requests (requests_unheld) hold nothing.
  uint64_t now = g.t;
  CHECK(tandem::hook::online_request_open(g.shm, now));
  g.shm->policy = TANDEM_POLICY_SLO;
  CHECK_FALSE(tandem::hook::online_request_open(g.shm, now));
  g.shm->policy = TANDEM_POLICY_FILL;
  // Ended, it holds nothing.
  g.request(false);
  g.tick(true);
  CHECK_FALSE(tandem::hook::online_request_open(g.shm, g.t));
}

TEST_CASE("fill online hold: a hold costs nothing while training's queued work still runs") {
  FillGpu g(0.05);
  for (int i = 0; i < 5; ++i) g.tick(true);
  tandem_client_page* train = g.gpu.segment().page(g.train);
  train->markers_recorded = 1000;  // a long queue, a marker of it passing each tick beside the request
  uint64_t held = 0;
  for (int k = 0; k < 500; ++k) {
    g.request(true);
    train->markers_completed += 1;
    g.tick(false);
    held += g.training_held();
  }
  CHECK(held == 500);  // never charged: the part is not spent
  // No progress any more (the queue ran out): the hold costs it.
  uint64_t more = 0;
  for (int k = 0; k < 400; ++k) {
    g.request(true);
    g.tick(false);
    more += g.training_held();
  }
  CHECK(more <= 51);
}

TEST_CASE("fill online hold: a request held open from a bubble for ever is charged from the bubble's predicted end") {
  FillGpu g(0.05);
  for (int iteration = 0; iteration < 4; ++iteration) {  // learned: 20 ms busy, 10 ms bubbles
    for (int i = 0; i < 20; ++i) g.tick(true);
    for (int i = 0; i < 10; ++i) g.tick(false);
  }
  for (int i = 0; i < 20; ++i) g.tick(true);
  g.tick(false);
  REQUIRE(g.gpu.gpu_phase() == GpuPhase::bubble);
  uint64_t held = 0;
  for (int k = 0; k < 800; ++k) {  // a hostile client: its request open, refreshed, for ever
    g.request(true);
    g.tick(false);
    held += g.training_held();
  }
  INFO("held " << held << " of 800 ms (one window of the holds)");
  CHECK(held <= 10 + 51);  // the bubble's rest, then the part
}

TEST_CASE("hold horizon: holds used ahead of the second's pace lengthen it; the base follows the seconds") {
  HoldHorizon h;
  const uint64_t busy = 60 * kMs;
  const double part = 50.0 * kMs;  // of a second, at 5%
  uint64_t second = 1000 * kMs;    // the holds' window's start
  h.tick({second, 0, 0, part}, busy);
  CHECK(h.horizon_ns() == 0);  // nothing used: every request holds
  h.tick({second, 20.0 * kMs, 5.0 * kMs, part}, busy);
  CHECK(h.horizon_ns() == 15 * kMs);  // 15 ms ahead of the pace: requests 15 ms from a bubble wait
  h.tick({second, 20.0 * kMs, 30.0 * kMs, part}, busy);
  CHECK(h.horizon_ns() == 0);  // behind it
  h.tick({second, 200.0 * kMs, 30.0 * kMs, part}, busy);
  CHECK(h.horizon_ns() == busy);  // at most a compute phase
  // That second used more than 90% of its part: the next ones start with a longer base.
  h.tick({second += 1000 * kMs, 0, 0, part}, busy);
  CHECK(h.base_ns() == busy / 16);
  CHECK(h.horizon_ns() == busy / 16);
  // One that used less than 60%: shorter again.
  h.tick({second, 20.0 * kMs, 49.0 * kMs, part}, busy);
  h.tick({second += 1000 * kMs, 0, 0, part}, busy);
  CHECK(h.base_ns() == 0);
  // Between the two: unchanged.
  h.tick({second, 40.0 * kMs, 49.0 * kMs, part}, busy);
  h.tick({second += 1000 * kMs, 0, 0, part}, busy);
  CHECK(h.base_ns() == 0);
}

TEST_CASE("hold horizon: seconds without a hold shorten the base") {
  // A horizon as long as the compute phase sends every request to a bubble, so no hold is
  // made: such seconds must still count, or the base would stay there for good.
  HoldHorizon h;
  const uint64_t busy = 64 * kMs;
  const double part = 50.0 * kMs;
  uint64_t second = 1000 * kMs;
  for (int i = 0; i < 20; ++i) {  // seconds that used all of their part
    h.tick({second, 0, 0, part}, busy);
    h.tick({second, part, part, part}, busy);
    second += 1000 * kMs;
  }
  REQUIRE(h.base_ns() == busy);
  for (int i = 0; i < 16; ++i) {  // seconds without a hold
    h.tick({second, 0, 0, part}, busy);
    h.tick({second, 0, 25.0 * kMs, part}, busy);
    second += 1000 * kMs;
  }
  h.tick({second, 0, 0, part}, busy);
  CHECK(h.base_ns() == 0);
}

TEST_CASE("hold horizon: bubble_due covers the horizon before the predicted bubble and as long after it") {
  HoldHorizon h;
  h.tick({1000 * kMs, 15.0 * kMs, 5.0 * kMs, 50.0 * kMs}, 60 * kMs);  // 10 ms
  const uint64_t start = 1000 * kMs, busy = 60 * kMs;      // the bubble is due at start + 60 ms
  CHECK_FALSE(h.bubble_due(start + 49 * kMs, start, busy));
  CHECK(h.bubble_due(start + 50 * kMs, start, busy));
  CHECK(h.bubble_due(start + 70 * kMs, start, busy));
  CHECK_FALSE(h.bubble_due(start + 71 * kMs, start, busy));  // overdue: the prediction was wrong, hold
  CHECK_FALSE(h.bubble_due(start + 50 * kMs, start, 0));     // nothing learned
}

TEST_CASE("fill online hold: with the holds ahead of their pace, a request near the bubble waits for it") {
  FillGpu g(0.05);
  auto iteration = [&] {  // 20 ms computing, then a 10 ms bubble
    for (int i = 0; i < 20; ++i) g.tick(true);
    for (int i = 0; i < 10; ++i) g.tick(false);
  };
  auto computing_with_request = [&](int ticks) {
    for (int i = 0; i < ticks; ++i) {
      g.request(true);
      g.tick(true);
    }
    g.request(false);
  };
  const uint64_t first = g.t + kMs;  // the holds' windows count from the first tick
  while (g.t < first + 1000 * kMs) iteration();  // the phases learned, the next second begun
  for (int i = 0; i < 10; ++i) g.tick(false);  // its first bubble, if it began in a compute phase
  computing_with_request(8);  // 8 ms of holds early in the second: ahead of 5% of it
  for (int i = 0; i < 5; ++i) g.tick(true);
  for (int i = 0; i < 10; ++i) g.tick(false);
  REQUIRE(g.gpu.detector().mean_busy_ns() >= 15 * kMs);  // the compute phase as learned
  REQUIRE(g.gpu.hold_horizon().horizon_ns() >= 4 * kMs);
  REQUIRE(g.gpu.hold_horizon().horizon_ns() <= 8 * kMs);
  // The next compute phase: early in it a request holds training; near its end it waits.
  int unheld_early = 0, unheld_late = 0;
  for (int i = 0; i < 20; ++i) {
    g.tick(true);
    if (i >= 1 && i < 5) unheld_early += g.shm->requests_unheld;
    if (i >= 14) unheld_late += g.shm->requests_unheld;
  }
  CHECK(unheld_early == 0);
  CHECK(unheld_late == 6);
  CHECK(g.shm->slots[g.train].gate == TANDEM_GATE_OPEN);  // waiting for the bubble holds nothing
}
