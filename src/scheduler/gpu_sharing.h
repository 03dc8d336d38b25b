// Which clients had work on the GPU in each period, told to every client as "another client's
// work ran beside yours" (tandem_slot.others_busy, others_busy_ticks). A gated client learns
// what its kernels cost by timing some of them (src/hook/kernel_cost.h); one timed while
// another process's kernels shared the GPU took longer than it costs (four fillers beside
// each other were charged about twice what their requests took), so such a timing may lower a
// learned cost but not raise it.
// Pure logic on the pages' bounded views; tandemd calls it every period.
#pragma once
#include <array>
#include <cstdint>

#include "tandem/shm_abi.h"

namespace tandem::scheduler {

class GpuSharing {
 public:
  // One active client's page this period; `generation` tells a slot's new client apart.
  void observe(int slot, uint32_t generation, const tandem_client_page& page);
  // After every active client was observed: each one's others_busy and others_busy_ticks.
  void publish(tandem_shm_header* shm);

  // A client had work on the GPU this period: launched and not yet complete (no marker has
  // passed its last launch), or launched or completed some since the last period.
  static bool busy(const tandem_client_page& now, uint64_t issued_before, uint64_t completed_before);

 private:
  struct Seen {
    uint32_t generation = 0;
    uint64_t issued_ns = 0, completed_ns = 0;
  };
  std::array<Seen, TANDEM_MAX_SLOTS> seen_{};
  uint64_t observed_ = 0;  // bit i: slot i was observed this period
  uint64_t busy_ = 0;      // bit i: slot i had work on the GPU this period
};

}  // namespace tandem::scheduler
