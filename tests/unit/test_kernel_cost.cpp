// The cost a gated launch is charged (kernel_cost.h): learned per kernel shape from the
// kernel's own GPU time (two timing events around a sampled launch), never from the wall time
// between completion markers, which holds a framework's host gaps and the poll's delay.
#include <catch2/catch.hpp>
#include <cstdint>
#include <algorithm>

#include "kernel_cost.h"
#include "real_driver.h"

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
  int sample = cost_sample_begin(key, threads, nullptr, false);
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
  int sample = cost_sample_begin(other, 500 * 256, nullptr, false);
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
  sample = cost_sample_begin(failed, 501 * 256, nullptr, false);
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
  uint64_t c = 0;
  uint32_t n = 0;
  for (int i = 0; i < 400; ++i, ++n) c = next_learned_cost(c, n, i % 2 ? 3000000 : 1000000);
  CHECK(c >= 1000000);
  CHECK(c < 1500000);
  // The first measurement is taken as it is; a kernel that became longer is followed.
  CHECK(next_learned_cost(0, 0, 42) == 42);
  c = 1000000;
  for (int i = 0; i < 30; ++i) c = next_learned_cost(c, 5, 4000000);
  CHECK(c > 3900000);
  // One that became shorter, within a few launches.
  for (int i = 0; i < 8; ++i) c = next_learned_cost(c, 5, 500000);
  CHECK(c < 520000);
}
