// tandemd tells every client whether another client's work was on the GPU in each period
// (tandem_slot.others_busy, others_busy_ticks), so that a kernel timed beside another
// process's work does not teach its process a higher cost (src/hook/kernel_cost.h).
#include <catch2/catch.hpp>

#include "gpu_scheduler.h"

using namespace tandem::scheduler;

namespace {
constexpr uint64_t kMs = 1000000;

struct SharedGpu {
  GpuScheduler gpu{"00112233445566778899aabbccddeeff", SchedulerParams{}};
  tandem_shm_header* shm = gpu.segment().shm();
  int train = gpu.segment().claim(500, TANDEM_ROLE_TRAINING);
  int a = gpu.segment().claim(501, TANDEM_ROLE_BATCH_INFERENCE);
  int b = gpu.segment().claim(502, TANDEM_ROLE_BATCH_INFERENCE);
  uint64_t t = 1000 * kMs;

  void tick() { gpu.tick(t += kMs); }
  tandem_client_page* page(int slot) { return gpu.segment().page(slot); }
  uint32_t ticks(int slot) const { return shm->slots[slot].others_busy_ticks; }
  uint32_t busy(int slot) const { return shm->slots[slot].others_busy; }
};
}  // namespace

TEST_CASE("gpu sharing: a client hears of the others' work on the GPU, not of its own") {
  SharedGpu g;
  g.tick();  // nothing launched yet
  CHECK(g.ticks(g.a) == 0);
  CHECK(g.busy(g.b) == 0);
  // Filler a has work in flight: b and training hear of it, a does not.
  g.page(g.a)->issued_ns = 2 * kMs;
  g.page(g.a)->markers_recorded = 1;
  g.tick();
  CHECK(g.busy(g.b) == 1);
  CHECK(g.busy(g.train) == 1);
  CHECK(g.busy(g.a) == 0);
  CHECK(g.ticks(g.b) == 1);
  CHECK(g.ticks(g.a) == 0);
  // Still in flight a period later: counted again.
  g.tick();
  CHECK(g.ticks(g.b) == 2);
  // It completes within the next period: that period was shared too (the work ran in it).
  g.page(g.a)->markers_completed = 1;
  g.page(g.a)->completed_ns = 2 * kMs;
  g.tick();
  CHECK(g.ticks(g.b) == 3);
  CHECK(g.busy(g.b) == 1);
  // Then a quiet period: nobody's work, nothing counted.
  g.tick();
  CHECK(g.ticks(g.b) == 3);
  CHECK(g.busy(g.b) == 0);
  // Work launched and finished between two periods is seen by its counters' moves.
  g.page(g.train)->issued_ns = 7 * kMs;
  g.page(g.train)->completed_ns = 7 * kMs;
  g.tick();
  CHECK(g.busy(g.a) == 1);
  CHECK(g.busy(g.b) == 1);
  CHECK(g.busy(g.train) == 0);
  CHECK(g.ticks(g.a) == 1);
}

TEST_CASE("gpu sharing: a slot's new client starts from its own counters") {
  SharedGpu g;
  g.page(g.a)->issued_ns = g.page(g.a)->completed_ns = 5 * kMs;
  g.tick();
  g.tick();
  CHECK(g.busy(g.b) == 0);  // a's counters stand still: a is idle
  // a leaves; a new client takes its slot and has not launched: not busy, though its counters
  // differ from the last client's.
  g.gpu.segment().release(g.a);
  int c = g.gpu.segment().claim(503, TANDEM_ROLE_BATCH_INFERENCE);
  g.tick();
  g.tick();
  CHECK(g.busy(g.b) == 0);
  CHECK(g.busy(c) == 0);
}
