// The cost a gated launch is charged (kernel_cost.h): learned per kernel shape from the
// kernel's own GPU time (two timing events around a sampled launch), never from the wall time
// between completion markers, which holds a framework's host gaps and the poll's delay.
#include <catch2/catch.hpp>
#include <cstdint>
#include <algorithm>
#include <string>

#include "daemon_link.h"
#include "kernel_cost.h"
#include "real_driver.h"
#include "stats_writer.h"

using namespace tandem::hook;

namespace {

// A driver whose events complete when told, with the elapsed time the test sets.
struct FakeEvents {
  static inline float elapsed_ms = 0;
  static inline bool complete = true;
  static inline uintptr_t next = 0x1000;
  static inline int records = 0;
  static CUresult create(CUevent* e, unsigned) {
    *e = reinterpret_cast<CUevent>(next += 0x10);
    return CUDA_SUCCESS;
  }
  static CUresult record(CUevent, CUstream) {
    ++records;
    return CUDA_SUCCESS;
  }
  static CUresult query(CUevent) { return complete ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }
  static CUresult elapsed(float* ms, CUevent, CUevent) {
    *ms = elapsed_ms;
    return CUDA_SUCCESS;
  }
};

struct FakeDriver {
  RealDriver saved = g_real;
  FakeDriver() {
    g_real.cuEventCreate = FakeEvents::create;
    g_real.cuEventRecord = FakeEvents::record;
    g_real.cuEventRecord_ptsz = FakeEvents::record;
    g_real.cuEventQuery = FakeEvents::query;
    g_real.cuEventElapsedTime_v2 = FakeEvents::elapsed;
    FakeEvents::complete = true;
  }
  ~FakeDriver() { g_real = saved; }
};

// One launch of `key` timed at `ms` on the fake driver; false when it was not sampled.
bool timed_launch(uintptr_t key, uint64_t threads, float ms) {
  int sample = cost_sample_begin(key, threads, nullptr, false, nullptr);
  if (sample < 0) return false;
  cost_sample_end(sample, nullptr, false, true);
  FakeEvents::elapsed_ms = ms;
  poll_cost_samples();
  return true;
}

}  // namespace

TEST_CASE("kernel cost: a shape costs what its launches took on the GPU") {
  FakeDriver driver;
  int function = 0;
  uintptr_t key = kernel_cost_key(&function, 66000);
  uint64_t threads = 66000ull * 256;
  CHECK(learned_cost_ns(key) == 0);
  // Not timed yet: threads at the per-thread estimate, never below a small kernel's floor.
  CHECK(kernel_cost_ns(key, threads) == std::min<uint64_t>((threads * cost_figures().ns_per_thread_q10) >> 10, kMaxGuessNs));
  CHECK(kernel_cost_ns(kernel_cost_key(&function, 1ull << 30), 1ull << 40) == kMaxGuessNs);  // a wild guess is capped
  CHECK(kernel_cost_ns(kernel_cost_key(&function, 1), 128) == kMinKernelCostNs);
  REQUIRE(timed_launch(key, threads, 1.0f));
  CHECK(learned_cost_ns(key) == 1000000);
  CHECK(kernel_cost_ns(key, threads) == 1000000);
  // Another grid of the same function is another shape.
  CHECK(learned_cost_ns(kernel_cost_key(&function, 66001)) == 0);
  // A launch not yet complete teaches nothing until it is.
  uintptr_t other = kernel_cost_key(&function, 500);
  int sample = cost_sample_begin(other, 500 * 256, nullptr, false, nullptr);
  REQUIRE(sample >= 0);
  cost_sample_end(sample, nullptr, false, true);
  FakeEvents::complete = false;
  FakeEvents::elapsed_ms = 0.25f;
  poll_cost_samples();
  CHECK(learned_cost_ns(other) == 0);
  FakeEvents::complete = true;
  poll_cost_samples();
  CHECK(learned_cost_ns(other) == 250000);
  // A launch that failed is not timed.
  uintptr_t failed = kernel_cost_key(&function, 501);
  sample = cost_sample_begin(failed, 501 * 256, nullptr, false, nullptr);
  REQUIRE(sample >= 0);
  cost_sample_end(sample, nullptr, false, false);
  poll_cost_samples();
  CHECK(learned_cost_ns(failed) == 0);
}

TEST_CASE("kernel cost: every launch of a new shape is timed, then one in 32") {
  FakeDriver driver;
  int function = 0;
  uintptr_t key = kernel_cost_key(&function, 7777);
  for (int i = 0; i < 4; ++i) CHECK(timed_launch(key, 7777 * 128, 0.1f));
  int timed = 0;
  for (int i = 0; i < 320; ++i) timed += timed_launch(key, 7777 * 128, 0.1f);
  CHECK(timed >= 8);
  CHECK(timed <= 12);
}

TEST_CASE("kernel cost: the launch path's one probe charges and samples as the model says") {
  // kernel_charge() is the launch path's inline lookup: the cost kernel_cost_ns() says, and
  // whether the launch is timed as cost_sample_begin() decides (learning, then one in 32).
  FakeDriver driver;
  int function = 0;
  uintptr_t key = kernel_cost_key(&function, 8888);
  uint64_t threads = 8888ull * 128;
  ShapeCharge first = kernel_charge(key, threads);
  CHECK(first.timed);
  CHECK(first.ns == kernel_cost_ns(key, threads));  // the guess
  // Learning: every launch timed, charged what it was learned at.
  for (int i = 0; i < 4; ++i) {
    ShapeCharge c = kernel_charge(key, threads);
    REQUIRE(c.timed);
    if (i > 0) CHECK(c.ns == 200000);
    int sample = cost_sample_claim(key, threads, nullptr, false, nullptr);
    REQUIRE(sample >= 0);
    cost_sample_end(sample, nullptr, false, true);
    FakeEvents::elapsed_ms = 0.2f;
    poll_cost_samples();
  }
  // Learned: one launch in 32 is timed, every one charged the learned cost.
  int timed = 0;
  for (int i = 0; i < 320; ++i) {
    ShapeCharge c = kernel_charge(key, threads);
    CHECK(c.ns == 200000);
    timed += c.timed;
  }
  CHECK(timed == 10);
  // A shape whose timing just completed is charged it on its next launch, not guessed.
  uintptr_t fresh = kernel_cost_key(&function, 8889);
  int sample = cost_sample_claim(fresh, 8889 * 128, nullptr, false, nullptr);
  REQUIRE(sample >= 0);
  cost_sample_end(sample, nullptr, false, true);
  FakeEvents::elapsed_ms = 0.05f;
  CHECK(kernel_charge(fresh, 8889 * 128).ns == 50000);
  // A graph never timed is charged nothing here (its caller charges its kernel nodes).
  int exec = 0;
  ShapeCharge graph = graph_charge(graph_cost_key(&exec));
  CHECK(graph.ns == 0);
  CHECK(graph.timed);
}

TEST_CASE("kernel cost: a framework's many small kernels do not inflate the per-thread estimate") {
  // The starvation this model replaces: small kernels cost a fixed few microseconds whatever
  // their threads, so taken as a per-thread rate they made every large kernel look tens of
  // milliseconds long. Kernels under kPerThreadMinNs teach the per-thread rate nothing.
  uint64_t q10 = 128;
  for (int i = 0; i < 1000; ++i) q10 = next_ns_per_thread_q10(q10, 128, 40000);
  CHECK(q10 == 128);
  // A long kernel does: 2 ms over 16.9M threads is 0.118 ns a thread.
  for (int i = 0; i < 20; ++i) q10 = next_ns_per_thread_q10(q10, 16896000, 2000000);
  CHECK(q10 == Approx(2000000.0 * 1024 / 16896000).epsilon(0.05));
}

TEST_CASE("kernel cost: the learned cost follows the short measurements, not another process's") {
  // On a shared GPU a measurement is lengthened by the other process's kernels, never
  // shortened: half of them three times too long leave the estimate near the kernel's own time.
  LearnedCost c;
  for (int i = 0; i < 400; ++i) c = next_learned_cost(c, i % 2 ? 3000000 : 1000000);
  CHECK(c.ns >= 1000000);
  CHECK(c.ns < 1500000);
  // The first measurement is taken as it is; a kernel that became longer is followed.
  CHECK(next_learned_cost({}, 42).ns == 42);
  c = {1000000, 5, false};
  for (int i = 0; i < 30; ++i) c = next_learned_cost(c, 4000000);
  CHECK(c.ns > 3900000);
  // One that became shorter, within a few launches.
  for (int i = 0; i < 8; ++i) c = next_learned_cost(c, 500000);
  CHECK(c.ns < 520000);
}

TEST_CASE("kernel cost: a timing that shared the GPU lowers a cost but never raises it") {
  // Four fillers' kernels side by side each took two to four times their own time; learned
  // from those timings (an eighth of the way up each), their costs settled at about twice what
  // they were and the fillers were granted half the work the bubbles held.
  LearnedCost c{1000000, 5, false};
  for (int i = 0; i < 100; ++i) c = next_learned_cost(c, 3000000, true);
  CHECK(c.ns == 1000000);
  c = next_learned_cost(c, 800000, true);  // still an upper bound on the kernel's own time
  CHECK(c.ns == 900000);
  CHECK_FALSE(c.shared_only);
  // A shape first timed beside another process's work: that timing stands for now, any
  // shorter one replaces it at once, and the first timing made alone replaces it in any case.
  c = next_learned_cost({}, 13000000, true);
  CHECK(c.ns == 13000000);
  CHECK(c.shared_only);
  c = next_learned_cost(c, 20000000, true);
  CHECK(c.ns == 13000000);
  c = next_learned_cost(c, 2500000, true);
  CHECK(c.ns == 2500000);
  CHECK(c.shared_only);
  c = next_learned_cost(c, 1000000, false);
  CHECK(c.ns == 1000000);
  CHECK_FALSE(c.shared_only);
  CHECK(c.samples == 4);
  // A kernel that really became longer is followed by the timings made alone.
  for (int i = 0; i < 30; ++i) c = next_learned_cost(c, 4000000, false);
  CHECK(c.ns > 3900000);
  // The per-thread rate the same way: a shared timing of a long kernel only lowers it.
  CHECK(next_ns_per_thread_q10(128, 16896000, 6000000, true) == 128);
  CHECK(next_ns_per_thread_q10(128, 16896000, 1000000, true) < 128);
}

TEST_CASE("kernel cost: tandemd's word that another client's work was on the GPU marks a timing shared") {
  FakeDriver driver;
  tandem_slot slot{};
  const tandem_slot* saved = g_slot.load();
  g_slot.store(&slot);
  int function = 0;
  auto timed = [&](uintptr_t key, float ms, auto&& during) {
    int sample = cost_sample_begin(key, 1000, nullptr, false, &slot);
    REQUIRE(sample >= 0);
    cost_sample_end(sample, nullptr, false, true);
    during();
    FakeEvents::elapsed_ms = ms;
    poll_cost_samples();
  };
  uint64_t shared_before = cost_figures().shared;
  uintptr_t key = kernel_cost_key(&function, 4242);
  timed(key, 1.0f, [] {});  // alone: learned as it is
  CHECK(learned_cost_ns(key) == 1000000);
  // A period in which another client had work passed while the kernel ran: no rise.
  timed(key, 3.0f, [&] { __atomic_fetch_add(&slot.others_busy_ticks, 1u, __ATOMIC_RELAXED); });
  CHECK(learned_cost_ns(key) == 1000000);
  // Launched while the last period was shared: no rise either.
  slot.others_busy = 1;
  timed(key, 3.0f, [] {});
  CHECK(learned_cost_ns(key) == 1000000);
  CHECK(cost_figures().shared == shared_before + 2);
  // Alone again: a longer kernel is followed.
  slot.others_busy = 0;
  timed(key, 3.0f, [] {});
  CHECK(learned_cost_ns(key) == 1250000);
  g_slot.store(saved);
  // The stats file says how many timings shared the GPU (docs/stats.md).
  std::string text = stats_json("batch-inference");
  CHECK(text.find("\"timed\": " + std::to_string(cost_figures().samples)) != std::string::npos);
  CHECK(text.find("\"timed_shared\": " + std::to_string(cost_figures().shared)) != std::string::npos);
}
