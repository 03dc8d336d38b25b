// Who may hold training back under policy slo, and for how long (src/scheduler/request_holds.h,
// docs/security.md): a stuck request frees training wherever requests gate it, a target of an
// hour does not make a request stuck only after four, and a client that keeps a request open
// for ever holds training at most 1 - floor of every window.
#include <catch2/catch.hpp>

#include "gpu_scheduler.h"
#include "request_holds.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;

// A GPU under policy slo with a training process and an online inference process whose page
// the test writes as a hostile client would.
struct HeldGpu {
  GpuScheduler gpu{"00112233445566778899aabbccddeeff", params()};
  tandem_shm_header* shm = gpu.segment().shm();
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  int online = gpu.segment().claim(300, TANDEM_ROLE_INFERENCE);
  uint64_t t = 1000 * kMs;

  static SchedulerParams params() {
    SchedulerParams p;
    p.policy = TANDEM_POLICY_SLO;
    p.slo.idle_ns = 50 * kMs;
    return p;
  }
  tandem_client_page* page() { return gpu.segment().page(online); }
  void open_request(uint32_t slo_us) {
    page()->requests_open = 1;
    page()->slo_us = slo_us;
    page()->request_activity_ns = t;
  }
  // The training process is held back now: gated, and a request published as holding it (and
  // not lifted for a busy server).
  bool training_held() const {
    return shm->slots[train].gate == TANDEM_GATE_TOKENS && shm->slots[online].requests_open > 0 &&
           shm->requests_unheld == 0;
  }
  bool training_free() const {
    return shm->slots[train].gate == TANDEM_GATE_OPEN && shm->slots[train].inflight_bound_ns == 0;
  }
};
}  // namespace

TEST_CASE("request holds: the stuck rule, 4 times the target and at most 10 s") {
  OnlineClient c;
  c.requests_open = 1;
  c.activity_ns = 100 * kMs;
  c.slo_ns = 100 * kMs;
  CHECK_FALSE(request_stuck(c, 499 * kMs));
  CHECK(request_stuck(c, 500 * kMs));
  c.slo_ns = 3600000 * kMs;  // a target of an hour
  CHECK_FALSE(request_stuck(c, 100 * kMs + kMaxStuckNs - 1));
  CHECK(request_stuck(c, 100 * kMs + kMaxStuckNs));
  c.slo_ns = 0;  // no target: its requests never held anything
  CHECK(request_stuck(c, 100 * kMs));
  c.requests_open = 0;
  CHECK_FALSE(request_stuck(c, 1000000 * kMs));
}

// The row 2: one request opened and never ended nor touched. The clients' gates ignored
// it after 4x its target, but the policy kept training gated with an in-flight bound, and
// training whose in-flight work sat at the bound with no completion marker pending never
// launched again. Now the request stops counting everywhere: published as holding nothing,
// and training runs ungated, without a bound, once inference has been idle for idle_ns.
TEST_CASE("request holds: a stuck request frees training's gate and in-flight bound") {
  HeldGpu g;
  REQUIRE(g.gpu.segment().ok());
  g.open_request(100000);  // 100 ms
  const uint64_t opened = g.t;
  for (g.t += kMs; g.t < opened + 399 * kMs; g.t += kMs) g.gpu.tick(g.t);
  CHECK(g.training_held());
  CHECK(g.shm->slots[g.train].inflight_bound_ns == 500000);
  uint32_t seq = g.shm->request_seq;
  g.gpu.tick(g.t = opened + 401 * kMs);
  CHECK(g.shm->slots[g.online].requests_open == 0);  // published: holds nothing
  CHECK(g.shm->request_seq != seq);                   // the gates waiting on it are woken
  CHECK(g.gpu.request_holds().stuck() == 1);
  for (; g.t < opened + 460 * kMs; g.t += kMs) g.gpu.tick(g.t);
  CHECK_FALSE(g.gpu.slo().active());
  CHECK(g.training_free());
  CHECK(g.page()->requests_open == 1);  // the client still says so: shown, not obeyed
}

TEST_CASE("request holds: a target of an hour makes a request stuck after 10 s, not 4 h") {
  HeldGpu g;
  g.open_request(3600u * 1000000u);
  const uint64_t opened = g.t;
  for (g.t += 10 * kMs; g.t < opened + kMaxStuckNs - 10 * kMs; g.t += 10 * kMs) g.gpu.tick(g.t);
  CHECK(g.gpu.request_holds().stuck() == 0);
  CHECK(g.gpu.slo().active());
  for (; g.t < opened + kMaxStuckNs + 60 * kMs; g.t += kMs) g.gpu.tick(g.t);
  CHECK(g.gpu.request_holds().stuck() == 1);
  CHECK(g.shm->slots[g.online].requests_open == 0);
  CHECK(g.training_free());
}

// The row 5: a member of the socket group keeps one request open for ever, refreshing
// it. Training fell from 355 to 2 launches/s, indefinitely. The floor, on its own: requests hold
// the best-effort job at most 1 - floor (0.95) of every second, in one stretch, and it runs at
// the duty cycle for the rest.
TEST_CASE("request holds: a request refreshed for ever holds the job at most 95% of each second") {
  RequestHolds holds;
  OnlineClient c;
  c.id = 1;
  c.requests_open = 1;
  c.slo_ns = 100 * kMs;
  const uint64_t start = 1000 * kMs;
  uint64_t held = 0, longest = 0, stretch = 0, ticks = 0;
  std::vector<uint64_t> free_per_window(3, 0);
  for (uint64_t t = start + kMs; t <= start + 3000 * kMs; t += kMs) {  // three windows of 1000 ticks
    c.activity_ns = t;  // "activity": never stuck
    std::vector<OnlineClient> online{c};
    bool hold = holds.allow(t, online, 1.0);
    holds.decided(true, hold, 1.0);
    ++ticks;
    if (hold) {
      ++held;
      longest = std::max(longest, ++stretch);
    } else {
      stretch = 0;
      ++free_per_window[(t - start - kMs) / (1000 * kMs)];
    }
  }
  INFO("held " << held << " of " << ticks << " ticks; longest stretch " << longest << " ms");
  CHECK(held > ticks * 9 / 10);  // requests still hold the job: the floor, not an off switch
  CHECK(held <= ticks * 951 / 1000);
  CHECK(longest <= 951);
  for (uint64_t free_ms : free_per_window) CHECK(free_ms >= 49);  // each second: 50 ms at duty 1
  CHECK(holds.refused_ns() >= 140 * kMs);
}

// The same client beside training on a GPU: a request always open is also a busy server's, so
// after three busy control periods tandemd lifts the hold altogether (docs/slo.md) and training
// runs at its duty cycle beside the requests; never held more than 95% of any second.
TEST_CASE("request holds: a request refreshed for ever does not hold training for ever") {
  HeldGpu g;
  g.open_request(100000);
  const uint64_t start = g.t;
  uint64_t held = 0, longest = 0, stretch = 0, ticks = 0;
  std::vector<uint64_t> free_per_window(3, 0);
  for (g.t += kMs; g.t <= start + 3000 * kMs; g.t += kMs) {
    g.page()->request_activity_ns = g.t;
    g.gpu.tick(g.t);
    ++ticks;
    if (g.training_held()) {
      ++held;
      longest = std::max(longest, ++stretch);
    } else {
      stretch = 0;
      CHECK(g.shm->slots[g.train].gate == TANDEM_GATE_TOKENS);  // still gated at the duty cycle
      ++free_per_window[(g.t - start - kMs) / (1000 * kMs)];
    }
  }
  INFO("held " << held << " of " << ticks << " ticks; longest stretch " << longest << " ms");
  CHECK(longest <= 951);
  for (uint64_t free_ms : free_per_window) CHECK(free_ms >= 49);
  CHECK(g.shm->requests_unheld == 1);
}

// The same client also reports latencies far over its target: the controller holds training at
// its minimum duty cycle, the floor itself, so requests may hold it no more at all.
TEST_CASE("request holds: at the minimum duty cycle requests hold training no more") {
  HeldGpu g;
  g.open_request(100000);
  const uint64_t start = g.t;
  uint64_t held_late = 0;
  for (g.t += kMs; g.t < start + 2000 * kMs; g.t += kMs) {
    tandem_client_page* p = g.page();
    p->request_activity_ns = g.t;
    p->latency_seq = g.shm->control_seq;
    p->latency_ns = 1000 * kMs;  // 10 x its target
    p->latency_samples = 10;
    g.gpu.tick(g.t);
    if (g.t >= start + 1300 * kMs && g.training_held()) ++held_late;
  }
  CHECK(g.gpu.slo().duty() == Approx(0.05));
  CHECK(held_late == 0);
  CHECK(g.shm->slots[g.train].gate == TANDEM_GATE_TOKENS);
  // 0.05 of the 500 us window, times 4 beside a busy server's requests (slo_policy.h)
  CHECK(g.shm->slots[g.train].inflight_bound_ns == 100000);
}
