// The bubble detector and the fill policy on synthetic progress sequences.
#include <catch2/catch.hpp>

#include "bubble_detector.h"
#include "fill_policy.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;

struct Feed {
  BubbleDetector d;
  uint64_t t = 0, launches = 0, recorded = 0, completed = 0;
  explicit Feed(int quiet = 1) : d(quiet) { d.update({t, 0, 0, 0}); }
  GpuPhase step(uint64_t new_launches, uint64_t new_markers, uint64_t markers_done) {
    t += kMs;
    launches += new_launches;
    recorded += new_markers;
    completed += markers_done;
    return d.update({t, launches, recorded, completed});
  }
};
}  // namespace

TEST_CASE("detector: the CPU ran ahead (no launches, work pending) is not a bubble") {
  Feed f;
  f.step(10, 1, 0);                             // launches and a marker behind them
  CHECK(f.step(0, 0, 0) == GpuPhase::busy);     // no new launches, but the marker is pending
  CHECK(f.step(0, 0, 0) == GpuPhase::busy);
  CHECK(f.step(0, 0, 1) == GpuPhase::bubble);   // the GPU passed the marker: idle
}

TEST_CASE("detector: communication (only NCCL work left) and host gaps are bubbles") {
  Feed f;
  f.step(4, 1, 0);
  f.step(0, 0, 1);  // compute done; NCCL kernels are not counted, so this is a bubble
  CHECK(f.d.phase() == GpuPhase::bubble);
  CHECK(f.d.phase_started_ns() == 2 * kMs);
  CHECK(f.step(0, 0, 0) == GpuPhase::bubble);   // host gap: nothing at all
  CHECK(f.step(3, 1, 0) == GpuPhase::busy);     // training resumes
}

TEST_CASE("detector: the quiet-sample threshold and the learned profile") {
  Feed f(3);
  f.step(1, 1, 1);
  CHECK(f.step(0, 0, 0) == GpuPhase::busy);
  CHECK(f.step(0, 0, 0) == GpuPhase::busy);
  CHECK(f.step(0, 0, 0) == GpuPhase::bubble);
  CHECK(f.d.phase_started_ns() == 2 * kMs);  // the bubble began at the first quiet sample

  Feed g;
  for (int iteration = 0; iteration < 5; ++iteration) {
    for (int i = 0; i < 3; ++i) g.step(5, 1, 1);  // 3 ms busy
    for (int i = 0; i < 2; ++i) g.step(0, 0, 0);  // 2 ms quiet
  }
  g.step(5, 1, 1);
  CHECK(g.d.bubbles() == 5);
  CHECK(g.d.mean_bubble_ns() == 2 * kMs);
  CHECK(g.d.longest_bubble_ns() == 2 * kMs);
  CHECK(g.d.predicted_bubble_end_ns() == 0);  // busy now
  g.step(0, 0, 0);
  CHECK(g.d.predicted_bubble_end_ns() == g.d.phase_started_ns() + 2 * kMs);
}

TEST_CASE("fill policy: closed, conservative, incremental (growing), stable") {
  FillParams p;
  p.period_ns = kMs;
  p.conservative_ns = 1 * kMs;
  p.stable_after_ns = 4 * kMs;
  p.incremental_start = 0.25;
  p.incremental_step = 0.25;
  p.max_inflight_ns = 100 * kMs;  // out of the way here
  FillPolicy policy(p);
  std::vector<FillerState> fillers{{7, 0, 0, true}};
  std::vector<Grant> grants;

  CHECK(policy.step(GpuPhase::busy, 10 * kMs, 0, fillers, grants) == FillPhase::closed);
  CHECK(grants.empty());
  CHECK(policy.revoke());
  uint64_t start = 10 * kMs;
  CHECK(policy.step(GpuPhase::bubble, start, start, fillers, grants) == FillPhase::conservative);
  CHECK(grants.empty());
  CHECK_FALSE(policy.revoke());
  std::vector<int64_t> amounts;
  for (uint64_t t = start + kMs; t < start + 4 * kMs; t += kMs) {
    CHECK(policy.step(GpuPhase::bubble, t, start, fillers, grants) == FillPhase::incremental);
    REQUIRE(grants.size() == 1);
    CHECK(grants[0].id == 7);
    amounts.push_back(grants[0].tokens_ns);
  }
  CHECK(amounts == std::vector<int64_t>{250000, 500000, 750000});
  CHECK(policy.step(GpuPhase::bubble, start + 4 * kMs, start, fillers, grants) == FillPhase::stable);
  CHECK(grants[0].tokens_ns == static_cast<int64_t>(100 * kMs));  // topped up to the in-flight bound
  // Training resumes: closed again, and the ramp starts over in the next bubble.
  CHECK(policy.step(GpuPhase::busy, start + 5 * kMs, start, fillers, grants) == FillPhase::closed);
  policy.step(GpuPhase::bubble, start + 10 * kMs, start + 8 * kMs, fillers, grants);
  CHECK(grants[0].tokens_ns == 250000);
}

TEST_CASE("fill policy: fair shares for 1, 2 and 4 fillers, the in-flight cap, idle fillers") {
  FillParams p;
  p.period_ns = kMs;
  p.conservative_ns = 0;
  p.stable_after_ns = 100 * kMs;  // incremental: the per-period budget is what is shared
  p.incremental_start = 1.0;
  p.max_inflight_ns = 8 * kMs;
  for (int n : {1, 2, 4}) {
    FillPolicy policy(p);
    std::vector<FillerState> fillers;
    for (int i = 0; i < n; ++i) fillers.push_back({i, 0, 0, true});
    std::vector<Grant> grants;
    policy.step(GpuPhase::bubble, kMs, 0, fillers, grants);
    REQUIRE(grants.size() == static_cast<size_t>(n));
    for (const Grant& g : grants) CHECK(g.tokens_ns == static_cast<int64_t>(kMs) / n);
  }
  std::vector<Grant> grants;
  // 1.8 ms in flight of a 2 ms bound leaves 0.2 ms; unspent tokens count as in flight too.
  std::vector<FillerState> busy{{0, 1800000, 0, true}, {1, 0, 2000000, true}, {2, 0, 0, false}};
  p.max_inflight_ns = 4 * kMs;  // a 2 ms share for each of the 2 fillers that want work
  FillPolicy shared(p);
  shared.step(GpuPhase::bubble, kMs, 0, busy, grants);
  REQUIRE(grants.size() == 1);
  CHECK(grants[0].id == 0);
  CHECK(grants[0].tokens_ns == 200000);
}

#include "gpu_scheduler.h"

TEST_CASE("admission: principle I (memory) and II (request longer than any bubble) say why") {
  SchedulerParams params;
  GpuScheduler gpu("0123456789abcdef0123456789abcdef", params);
  REQUIRE(gpu.segment().ok());
  tandem_shm_header* shm = gpu.segment().shm();
  shm->gpu_total_bytes = 80ull << 30;
  int train = gpu.segment().claim(100, TANDEM_ROLE_TRAINING);
  int online = gpu.segment().claim(200, TANDEM_ROLE_INFERENCE);
  shm->slots[train].peak_bytes = 50ull << 30;
  shm->slots[online].peak_bytes = 20ull << 30;
  uint64_t t = 0;
  gpu.tick(t += kMs);
  CHECK(gpu.refusals().empty());  // 70 GiB fit in 80

  shm->slots[online].peak_bytes = 40ull << 30;
  gpu.tick(t += kMs);
  REQUIRE(gpu.refusals().size() == 1);
  CHECK(gpu.refusals()[0].find("exceeds the GPU") != std::string::npos);
  shm->slots[online].peak_bytes = 1ull << 30;

  // Four iterations of 3 ms busy, 2 ms bubble; the online filler's request takes 5 ms.
  shm->slots[online].request_ns = 5 * kMs;
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 3; ++k) {
      shm->slots[train].launches += 1;
      gpu.tick(t += kMs);
    }
    gpu.tick(t += kMs);
    gpu.tick(t += kMs);
  }
  CHECK(gpu.detector().bubbles() >= 3);
  REQUIRE(gpu.refusals().size() == 1);
  CHECK(gpu.refusals()[0].find("longer than the longest bubble") != std::string::npos);
  CHECK(shm->gpu_phase == TANDEM_GPU_BUBBLE);
  CHECK(shm->predicted_bubble_end_ns > 0);
  shm->slots[online].request_ns = 1 * kMs;  // fits: no refusal
  gpu.tick(t += kMs);
  CHECK(gpu.refusals().empty());
}
