// FillPolicy: the three-phase token policy over synthetic bubbles, one step per 1 ms period.
#include <catch2/catch.hpp>

#include <cstring>

#include "fill_policy.h"
#include "gpu_scheduler.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;
constexpr int64_t kMsI = 1000000;

FillerState filler(int id, uint64_t inflight = 0, int64_t tokens = 0, bool wants = true) {
  return FillerState{id, inflight, tokens, wants};
}

FillParams params() {
  FillParams p;
  p.period_ns = kMs;
  p.conservative_ns = 1 * kMs;
  p.incremental_start = 0.25;
  p.incremental_step = 0.25;
  p.stable_after_ns = 4 * kMs;
  p.max_inflight_ns = 100 * kMs;  // out of the way unless a test is about it
  return p;
}

int64_t total(const std::vector<Grant>& grants) {
  int64_t sum = 0;
  for (const Grant& g : grants) sum += g.tokens_ns;
  return sum;
}
}  // namespace

TEST_CASE("FillPolicy: closed -> conservative -> incremental (growing) -> stable") {
  FillPolicy policy(params());
  std::vector<FillerState> fillers{filler(7)};
  std::vector<Grant> grants{{99, 1}};  // stale content must be cleared

  CHECK(policy.step(GpuPhase::busy, false, 10 * kMs, 0, 0, fillers, grants) == FillPhase::closed);
  CHECK(grants.empty());
  CHECK(policy.revoke());

  const uint64_t start = 10 * kMs;
  for (uint64_t t : {start, start + kMs / 2}) {
    CHECK(policy.step(GpuPhase::bubble, false, t, start, 0, fillers, grants) == FillPhase::conservative);
    CHECK(grants.empty());
    CHECK_FALSE(policy.revoke());
  }
  std::vector<int64_t> amounts;
  for (uint64_t t = start + kMs; t < start + 4 * kMs; t += kMs) {
    CHECK(policy.step(GpuPhase::bubble, false, t, start, 0, fillers, grants) == FillPhase::incremental);
    CHECK_FALSE(policy.revoke());
    REQUIRE(grants.size() == 1);
    CHECK(grants[0].id == 7);
    amounts.push_back(grants[0].tokens_ns);
  }
  CHECK(amounts == std::vector<int64_t>{250000, 500000, 750000});
  CHECK(policy.step(GpuPhase::bubble, false, start + 4 * kMs, start, 0, fillers, grants) == FillPhase::stable);
  CHECK(policy.rate() == 1.0);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 100 * kMsI);  // topped up to the in-flight share
  CHECK(policy.phase() == FillPhase::stable);
}

TEST_CASE("FillPolicy: busy training closes and revokes; the ramp restarts each bubble") {
  FillPolicy policy(params());
  std::vector<FillerState> fillers{filler(1)};
  std::vector<Grant> grants;
  policy.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, fillers, grants);
  policy.step(GpuPhase::bubble, false, 3 * kMs, 0, 0, fillers, grants);
  REQUIRE_FALSE(grants.empty());
  CHECK(policy.step(GpuPhase::busy, false, 4 * kMs, 0, 0, fillers, grants) == FillPhase::closed);
  CHECK(policy.revoke());
  CHECK(grants.empty());
  CHECK(policy.rate() == 0.0);

  // Next bubble: conservative again, then the ramp begins at incremental_start.
  CHECK(policy.step(GpuPhase::bubble, false, 8 * kMs, 8 * kMs, 0, fillers, grants) == FillPhase::conservative);
  CHECK(policy.step(GpuPhase::bubble, false, 9 * kMs, 8 * kMs, 0, fillers, grants) == FillPhase::incremental);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 250000);

  // A new bubble start without a busy step in between also restarts the ramp.
  policy.step(GpuPhase::bubble, false, 20 * kMs, 18 * kMs, 0, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 250000);
}

TEST_CASE("FillPolicy: the incremental fraction is capped at a whole period") {
  FillParams p = params();
  p.incremental_start = 0.5;
  p.incremental_step = 0.75;
  p.stable_after_ns = 50 * kMs;
  FillPolicy policy(p);
  std::vector<FillerState> fillers{filler(0)};
  std::vector<Grant> grants;
  std::vector<int64_t> amounts;
  for (uint64_t t = kMs; t <= 4 * kMs; t += kMs) {
    CHECK(policy.step(GpuPhase::bubble, false, t, 0, 0, fillers, grants) == FillPhase::incremental);
    amounts.push_back(total(grants));
  }
  CHECK(amounts == std::vector<int64_t>{500000, 1000000, 1000000, 1000000});
}

TEST_CASE("FillPolicy: fair shares among 1, 2 and 4 fillers") {
  FillParams p = params();
  p.incremental_start = 1.0;  // a whole period per period
  p.stable_after_ns = 100 * kMs;
  p.max_inflight_ns = 8 * kMs;
  for (int n : {1, 2, 4}) {
    FillPolicy policy(p);
    std::vector<FillerState> fillers;
    for (int i = 0; i < n; ++i) fillers.push_back(filler(10 + i));
    std::vector<Grant> grants;
    CHECK(policy.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, fillers, grants) == FillPhase::incremental);
    REQUIRE(grants.size() == static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      CHECK(grants[static_cast<size_t>(i)].id == 10 + i);
      CHECK(grants[static_cast<size_t>(i)].tokens_ns == kMsI / n);
    }
    CHECK(total(grants) == kMsI);

    // Stable: each topped up to an equal share of the in-flight bound.
    p.stable_after_ns = 0;
    FillPolicy stable(p);
    p.stable_after_ns = 100 * kMs;
    CHECK(stable.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, fillers, grants) == FillPhase::stable);
    REQUIRE(grants.size() == static_cast<size_t>(n));
    for (const Grant& g : grants) CHECK(g.tokens_ns == 8 * kMsI / n);
  }
}

TEST_CASE("FillPolicy: in-flight cap counts in-flight work and unspent tokens") {
  FillParams p = params();
  p.incremental_start = 1.0;
  p.stable_after_ns = 100 * kMs;
  p.max_inflight_ns = 4 * kMs;  // 2 ms each for the 2 fillers that want work
  FillPolicy policy(p);
  std::vector<FillerState> fillers{filler(0, 1800000, 0),   // 0.2 ms of room left
                                   filler(1, 0, 2000000),   // share already held as tokens
                                   filler(2, 2500000, 0),   // over its share (the bound shrank)
                                   filler(3, 0, 0, false)};  // idle: not counted in the split
  std::vector<Grant> grants;
  // Three want work: shares of 4/3 ms, and every one of them is already at or over it.
  policy.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, fillers, grants);
  CHECK(grants.empty());
  // Two want work: shares of 2 ms; only filler 0 has room, and only 0.2 ms of it.
  fillers.erase(fillers.begin() + 2);
  policy.step(GpuPhase::bubble, false, 3 * kMs, 0, 0, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].id == 0);
  CHECK(grants[0].tokens_ns == 200000);

  // A negative balance (overspent) gives no extra room.
  std::vector<FillerState> debt{filler(5, 1000000, -500000)};
  FillParams q = p;
  q.max_inflight_ns = 2 * kMs;
  q.stable_after_ns = 0;
  FillPolicy stable(q);
  stable.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, debt, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 1000000);
  // The cap holds in stable for every filler: inflight + tokens + grant <= share.
  std::vector<FillerState> many{filler(0, 300000, 100000), filler(1, 0, 0), filler(2, 999999, 1)};
  stable.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, many, grants);
  const int64_t share = 2 * kMsI / 3;
  REQUIRE(grants.size() == 2);  // filler 2 holds 1 ms > its 2/3 ms share: nothing
  CHECK(grants[0].id == 0);
  CHECK(grants[0].tokens_ns == share - 400000);
  CHECK(grants[1].id == 1);
  CHECK(grants[1].tokens_ns == share);
}

TEST_CASE("FillPolicy: near the predicted bubble end only work that can finish before it") {
  FillParams p = params();
  p.max_inflight_ns = 3 * kMs;
  p.stable_after_ns = 0;  // stable: each filler is topped up to its share of the bound
  std::vector<FillerState> fillers{filler(1)};
  std::vector<Grant> grants;
  const uint64_t end = 10 * kMs;  // the learned profile says the bubble ends here
  FillPolicy far(p);
  far.step(GpuPhase::bubble, false, 2 * kMs, 0, end, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 3 * kMsI);  // 8 ms left: the whole bound
  FillPolicy near(p);
  near.step(GpuPhase::bubble, false, end - kMs, 0, end, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == kMsI);  // 1 ms left: 1 ms of work
  FillPolicy past(p);
  past.step(GpuPhase::bubble, false, end + kMs, 0, end, fillers, grants);
  CHECK(grants.empty());  // overran the prediction: training may resume any moment
  std::vector<FillerState> two{filler(1), filler(2)};
  near.step(GpuPhase::bubble, false, end - kMs, 0, end, two, grants);
  REQUIRE(grants.size() == 2);
  CHECK(grants[0].tokens_ns + grants[1].tokens_ns == kMsI);  // shared, not per filler
  FillPolicy unknown(p);
  unknown.step(GpuPhase::bubble, false, end + kMs, 0, 0, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 3 * kMsI);  // nothing learned yet: the plain bound
  // Beside a collective (filling during it on): at least half the bound, whatever the
  // prediction says; a collective's end is not predictable from the bubbles.
  p.fill_during_comm = true;
  FillPolicy beside(p);
  beside.step(GpuPhase::bubble, true, end + kMs, 0, end, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 3 * kMsI / 2);
  FillPolicy beside_far(p);
  beside_far.step(GpuPhase::bubble, true, 2 * kMs, 0, end, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 3 * kMsI);  // far from the end: the whole bound, as elsewhere
}

TEST_CASE("FillPolicy: a launch longer than the filler's share is granted whole when the bubble holds it") {
  FillParams p = params();
  p.max_inflight_ns = 4 * kMs;
  p.stable_after_ns = 0;
  std::vector<Grant> grants;
  const uint64_t end = 30 * kMs;  // predicted bubble end
  auto waiting = [](int id, uint64_t want, uint64_t inflight = 0) {
    FillerState f = filler(id, inflight);
    f.want_ns = want;
    return f;
  };
  // A 20 ms graph replay, 28 ms before the bubble's end: granted in one piece.
  std::vector<FillerState> one{waiting(1, 20 * kMs)};
  FillPolicy policy(p);
  policy.step(GpuPhase::bubble, false, 2 * kMs, 0, end, one, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 20 * kMsI);
  // 15 ms before the end it would run into training: only the share, which it cannot use.
  policy.step(GpuPhase::bubble, false, 15 * kMs, 0, end, one, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 4 * kMsI);
  // Other fillers' queued work counts against the room: 10 ms queued, 18 ms left.
  std::vector<FillerState> busy{waiting(1, 10 * kMs), waiting(2, 0, 10 * kMs)};
  policy.step(GpuPhase::bubble, false, 12 * kMs, 0, end, busy, grants);
  for (const Grant& g : grants) CHECK(g.tokens_ns < 10 * kMsI);
  // Two fillers waiting with long launches: one whole launch a period.
  std::vector<FillerState> two{waiting(1, 8 * kMs), waiting(2, 8 * kMs)};
  policy.step(GpuPhase::bubble, false, 2 * kMs, 0, end, two, grants);
  REQUIRE(grants.size() == 2);
  CHECK(grants[0].tokens_ns + grants[1].tokens_ns == 8 * kMsI + 2 * kMsI);  // one whole, one share
  // ... and the whole launch goes round: four fillers waiting with long launches, each is
  // granted one whole in four periods (always the lowest slot's before: one filler of four
  // got a fifth of the others' requests).
  std::vector<FillerState> four{waiting(1, 8 * kMs), waiting(2, 8 * kMs), waiting(3, 8 * kMs), waiting(4, 8 * kMs)};
  int wholes[5] = {};
  for (int period = 0; period < 8; ++period) {
    policy.step(GpuPhase::bubble, false, 2 * kMs, 0, end, four, grants);
    for (const Grant& g : grants)
      if (g.tokens_ns == 8 * kMsI) ++wholes[g.id];
  }
  for (int id = 1; id <= 4; ++id) CHECK(wholes[id] == 2);
  // A launch that fits the share is paid from it as before; with no predicted end nothing whole.
  std::vector<FillerState> small{waiting(1, kMs)};
  policy.step(GpuPhase::bubble, false, 2 * kMs, 0, end, small, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 4 * kMsI);
  policy.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, one, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].tokens_ns == 4 * kMsI);
  // Closed: nothing, whatever waits.
  policy.step(GpuPhase::busy, false, 2 * kMs, 0, end, one, grants);
  CHECK(grants.empty());
}

TEST_CASE("FillPolicy: training's collective holds fillers back unless filling during it is on") {
  FillParams p = params();
  p.stable_after_ns = 0;
  std::vector<FillerState> fillers{filler(1)};
  std::vector<Grant> grants;
  FillPolicy held(p);
  CHECK(held.step(GpuPhase::bubble, true, 2 * kMs, 0, 0, fillers, grants) == FillPhase::communication);
  CHECK(grants.empty());
  CHECK(held.revoke());  // tokens left over would take time slices from the collective
  CHECK(std::strcmp(FillPolicy::phase_name(FillPhase::communication), "communication") == 0);
  // The collective is over: the rest of the bubble (a data-loading gap) is filled at once.
  CHECK(held.step(GpuPhase::bubble, false, 3 * kMs, 0, 0, fillers, grants) == FillPhase::stable);
  CHECK(grants.size() == 1);
  CHECK_FALSE(held.revoke());
  // Busy training is closed whatever the collectives do.
  CHECK(held.step(GpuPhase::busy, true, 4 * kMs, 0, 0, fillers, grants) == FillPhase::closed);
  // With MPS the collective and the filler run side by side: fill during it.
  p.fill_during_comm = true;
  FillPolicy mps(p);
  CHECK(mps.step(GpuPhase::bubble, true, 2 * kMs, 0, 0, fillers, grants) == FillPhase::stable);
  CHECK(grants.size() == 1);
}

TEST_CASE("FillPolicy: no grants to fillers that do not want work") {
  FillPolicy policy(params());
  std::vector<FillerState> fillers{filler(0, 0, 0, false), filler(1, 0, 0, true), filler(2, 0, 0, false)};
  std::vector<Grant> grants;
  policy.step(GpuPhase::bubble, false, 2 * kMs, 0, 0, fillers, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].id == 1);
  CHECK(grants[0].tokens_ns == 250000);  // the whole first incremental budget to the one that wants it

  std::vector<FillerState> none{filler(0, 0, 0, false)};
  CHECK(policy.step(GpuPhase::bubble, false, 10 * kMs, 0, 0, none, grants) == FillPhase::stable);
  CHECK(grants.empty());
  CHECK(policy.step(GpuPhase::bubble, false, 11 * kMs, 0, 0, {}, grants) == FillPhase::stable);
  CHECK(grants.empty());
}

TEST_CASE("FillPolicy: phase names") {
  CHECK(std::strcmp(FillPolicy::phase_name(FillPhase::closed), "closed") == 0);
  CHECK(std::strcmp(FillPolicy::phase_name(FillPhase::conservative), "conservative") == 0);
  CHECK(std::strcmp(FillPolicy::phase_name(FillPhase::incremental), "incremental") == 0);
  CHECK(std::strcmp(FillPolicy::phase_name(FillPhase::stable), "stable") == 0);
}

TEST_CASE("GpuScheduler, policy fill: a registered filler with nothing to do takes no share of a bubble") {
  SchedulerParams params;
  params.fill.max_inflight_ns = 4 * kMs;
  GpuScheduler gpu("00112233445566778899aabbccddeeaa", params);
  REQUIRE(gpu.segment().ok());
  tandem_shm_header* shm = gpu.segment().shm();
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  int working = gpu.segment().claim(600, TANDEM_ROLE_BATCH_INFERENCE);
  int idle = gpu.segment().claim(700, TANDEM_ROLE_BATCH_INFERENCE);
  uint64_t t = 1000 * kMs;
  auto balance = [&](int slot) {
    return static_cast<int64_t>(shm->slots[slot].token_limit_ns - gpu.segment().page(slot)->tokens_taken_ns);
  };
  // Training computes for 100 ms (launching every period), then leaves the GPU idle. One filler
  // waits at its gate the whole time; the other registered and never launched again.
  for (int i = 0; i < 100; ++i) {
    gpu.segment().page(train)->launches += 1;
    gpu.segment().page(working)->gate_want_us = 500;
    gpu.tick(t += kMs);
  }
  for (int i = 0; i < 5; ++i) gpu.tick(t += kMs);
  REQUIRE(gpu.fill_phase() == FillPhase::stable);
  CHECK(balance(working) == 4 * kMsI);  // the whole in-flight bound, not half of it
  CHECK(balance(idle) == 0);
  // The idle one launches again: from the next period it shares.
  gpu.segment().page(idle)->launches += 1;
  gpu.segment().page(working)->tokens_taken_ns += 4 * kMs;  // spent, and finished
  gpu.segment().page(working)->issued_ns += 4 * kMs;
  gpu.segment().page(working)->completed_ns += 4 * kMs;
  gpu.tick(t += kMs);
  CHECK(balance(idle) == 2 * kMsI);
  CHECK(balance(working) == 2 * kMsI);
}

TEST_CASE("GpuScheduler, policy fill: a bubble with only a point-to-point receive in flight is filled, a collective's is not") {
  SchedulerParams params;
  params.fill.max_inflight_ns = 4 * kMs;
  params.fill.fill_during_comm = false;  // TANDEM_FILL_COMM=0, the default
  GpuScheduler gpu("00112233445566778899aabbccddeeab", params);
  REQUIRE(gpu.segment().ok());
  tandem_shm_header* shm = gpu.segment().shm();
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  int filler = gpu.segment().claim(600, TANDEM_ROLE_BATCH_INFERENCE);
  tandem_client_page* stage = gpu.segment().page(train);
  uint64_t t = 1000 * kMs;
  auto balance = [&] {
    return static_cast<int64_t>(shm->slots[filler].token_limit_ns - gpu.segment().page(filler)->tokens_taken_ns);
  };
  for (int i = 0; i < 100; ++i) {  // a pipeline stage computes
    stage->launches += 1;
    gpu.segment().page(filler)->gate_want_us = 500;
    gpu.tick(t += kMs);
  }
  // Then waits in a receive for its peer: an NCCL marker pending behind a SendRecv kernel only.
  stage->nccl_markers_recorded += 1;
  stage->p2p_markers_recorded += 1;
  for (int i = 0; i < 5; ++i) gpu.tick(t += kMs);
  CHECK(gpu.gpu_phase() == GpuPhase::bubble);
  CHECK_FALSE(gpu.communicating());
  CHECK(gpu.receiving());
  CHECK(gpu.fill_phase() == FillPhase::stable);
  CHECK(balance() == 4 * kMsI);  // filled as an ordinary bubble
  // A collective is launched too (its NCCL marker is not a point-to-point one): held as before.
  stage->nccl_markers_recorded += 1;
  gpu.tick(t += kMs);
  CHECK(gpu.communicating());
  CHECK_FALSE(gpu.receiving());
  CHECK(gpu.fill_phase() == FillPhase::communication);
  CHECK(balance() == 0);  // revoked
  gpu.tick(t += kMs);
  CHECK(balance() == 0);
  // Both over: an ordinary bubble again.
  stage->nccl_markers_completed += 2;
  stage->p2p_markers_completed += 1;
  for (int i = 0; i < 3; ++i) gpu.tick(t += kMs);
  CHECK_FALSE(gpu.communicating());
  CHECK_FALSE(gpu.receiving());
  CHECK(balance() > 0);
}
