// Cost of one scheduling period of tandemd for one GPU with N clients (half training, half
// fillers), counters moving as in a real run. Prints JSON: ns per tick, p50 and p99. With a
// third argument `zico`, TANDEM_ZICO's policy runs too, each training client's memory rising
// and falling over a 40-period iteration.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_scheduler.h"

using namespace tandem::scheduler;

static uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int main(int argc, char** argv) {
  int clients = argc > 1 ? std::atoi(argv[1]) : 16;
  int ticks = argc > 2 ? std::atoi(argv[2]) : 100000;
  bool zico = argc > 3 && std::strcmp(argv[3], "zico") == 0;
  if (clients < 1 || clients > static_cast<int>(TANDEM_MAX_SLOTS) || ticks < 100 || (argc > 3 && !zico)) {
    std::fprintf(stderr, "usage: daemon_tick [CLIENTS 1..%u] [TICKS >= 100] [zico]\n", TANDEM_MAX_SLOTS);
    return 2;
  }
  SchedulerParams params;
  params.zico = zico;
  params.zico_budget_bytes = 1ull << 30;
  GpuScheduler gpu("00112233445566778899aabbccddeeff", params);
  if (!gpu.segment().ok()) return 1;
  std::vector<int> slots;
  for (int i = 0; i < clients; ++i)
    slots.push_back(gpu.segment().claim(1000 + i, i % 2 ? TANDEM_ROLE_BATCH_INFERENCE : TANDEM_ROLE_TRAINING));
  tandem_shm_header* shm = gpu.segment().shm();
  std::vector<double> costs;
  uint64_t t = now_ns();
  for (int k = 0; k < ticks; ++k) {
    // Training busy for 3 periods, then a 2-period bubble; fillers issue and complete work.
    for (int s : slots) {
      tandem_client_page& page = *gpu.segment().page(s);
      if (shm->slots[s].role == TANDEM_ROLE_TRAINING && k % 5 < 3) page.launches += 4, page.markers_recorded++, page.markers_completed++;
      if (shm->slots[s].role == TANDEM_ROLE_TRAINING) {  // 32 MiB, rising by 6 MiB a period for 20, falling back
        uint64_t phase = static_cast<uint64_t>((k + s * 7) % 40);
        page.bytes_in_use = (32ull + 6ull * (phase < 20 ? phase : 40 - phase)) << 20;
      }
      if (shm->slots[s].role != TANDEM_ROLE_TRAINING) page.issued_ns += 100000, page.completed_ns = page.issued_ns - 50000;
    }
    t += params.period_ns;
    uint64_t start = now_ns();
    gpu.tick(t);
    costs.push_back(static_cast<double>(now_ns() - start));
  }
  std::sort(costs.begin(), costs.end());
  std::printf("{\"benchmark\":\"daemon_tick\",\"zico\":%s,\"clients\":%d,\"ticks\":%d,\"ns_per_tick\":{\"p50\":%.0f,\"p99\":%.0f},"
              "\"period_ns\":%llu}\n", zico ? "true" : "false", clients, ticks, costs[costs.size() / 2], costs[costs.size() * 99 / 100],
              static_cast<unsigned long long>(params.period_ns));
  return 0;
}
