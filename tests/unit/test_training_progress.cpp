// How a GpuScheduler sums its training clients' progress for the bubble detector.
#include <catch2/catch.hpp>

#include "gpu_scheduler.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;
}  // namespace

TEST_CASE("training progress: one client's extra completions do not hide another's pending marker") {
  SchedulerParams params;
  GpuScheduler gpu("00112233445566778899aabbccddeeff", params);
  REQUIRE(gpu.segment().ok());
  const tandem_shm_header* shm = gpu.segment().shm();
  int a = gpu.segment().claim(100, TANDEM_ROLE_TRAINING);
  int b = gpu.segment().claim(101, TANDEM_ROLE_TRAINING);
  uint64_t t = 0;
  gpu.tick(t += kMs);
  // Client a is read with a completion ahead of its recordings (its counters are read one
  // after the other, or carried from an older registration); client b's marker is pending: the
  // GPU still has b's work. Summed as they are, the two cancelled out and the GPU looked idle.
  gpu.segment().page(a)->markers_completed = 1;
  gpu.segment().page(b)->markers_recorded = 1;
  for (int i = 0; i < 5; ++i) gpu.tick(t += kMs);
  CHECK(gpu.gpu_phase() == GpuPhase::busy);
  CHECK(shm->gpu_phase == TANDEM_GPU_BUSY);
  gpu.segment().page(b)->markers_completed = 1;  // b's work done: a bubble
  for (int i = 0; i < 3; ++i) gpu.tick(t += kMs);
  CHECK(gpu.gpu_phase() == GpuPhase::bubble);
}

TEST_CASE("trace: a training job that leaves while busy opens a bubble at its departure") {
  SchedulerParams params;
  GpuScheduler gpu("00112233445566778899aabbccddeeff", params);
  REQUIRE(gpu.segment().ok());
  int a = gpu.segment().claim(100, TANDEM_ROLE_TRAINING);
  uint64_t t = 0;
  gpu.tick(t += kMs);
  const uint64_t busy_from = t;
  for (int i = 0; i < 5; ++i) {  // launching all along: busy
    gpu.segment().page(a)->launches += 10;
    gpu.tick(t += kMs);
  }
  REQUIRE(gpu.gpu_phase() == GpuPhase::busy);
  gpu.segment().release(a);
  gpu.tick(t += kMs);
  std::vector<TraceEvent> events = gpu.trace().events_since(busy_from);
  REQUIRE(!events.empty());
  CHECK(events.back().kind == 'B');
  CHECK(events.back().t_ns == t);  // not busy_from, when the job's busy phase began
}
