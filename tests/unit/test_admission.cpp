// Admission checks (SpecInF principles I and II) of a GpuScheduler driven by synthetic ticks.
#include <catch2/catch.hpp>

#include "gpu_scheduler.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;
}  // namespace

TEST_CASE("admission: principle I (memory) and II (request longer than any bubble) say why") {
  SchedulerParams params;
  GpuScheduler gpu("0123456789abcdef0123456789abcdef", params);
  REQUIRE(gpu.segment().ok());
  tandem_shm_header* shm = gpu.segment().shm();
  shm->gpu_total_bytes = 80ull << 30;
  int train = gpu.segment().claim(100, TANDEM_ROLE_TRAINING);
  int online = gpu.segment().claim(200, TANDEM_ROLE_INFERENCE);
  gpu.segment().page(train)->peak_bytes = 50ull << 30;
  gpu.segment().page(online)->peak_bytes = 20ull << 30;
  uint64_t t = 0;
  gpu.tick(t += kMs);
  CHECK(gpu.refusals().empty());  // 70 GiB fit in 80

  gpu.segment().page(online)->peak_bytes = 40ull << 30;
  gpu.tick(t += kMs);
  REQUIRE(gpu.refusals().size() == 1);
  CHECK(gpu.refusals()[0].find("exceeds the GPU") != std::string::npos);
  gpu.segment().page(online)->peak_bytes = 1ull << 30;

  // Four iterations of 3 ms busy, 2 ms bubble; the online filler's request takes 5 ms.
  gpu.segment().page(online)->request_ns = 5 * kMs;
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 3; ++k) {
      gpu.segment().page(train)->launches += 1;
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
  gpu.segment().page(online)->request_ns = 1 * kMs;  // fits: no refusal
  gpu.tick(t += kMs);
  CHECK(gpu.refusals().empty());
}
