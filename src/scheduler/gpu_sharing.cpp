#include "gpu_sharing.h"

#include <cstddef>

namespace tandem::scheduler {

static_assert(TANDEM_MAX_SLOTS <= 64, "one bit a slot");

bool GpuSharing::busy(const tandem_client_page& now, uint64_t issued_before, uint64_t completed_before) {
  return now.issued_ns > now.completed_ns || now.markers_recorded > now.markers_completed ||
         now.issued_ns != issued_before || now.completed_ns != completed_before;
}

void GpuSharing::observe(int slot, uint32_t generation, const tandem_client_page& page) {
  Seen& s = seen_[static_cast<size_t>(slot)];
  if (s.generation != generation) s = Seen{generation, 0, 0};  // a new client starts from nothing
  uint64_t bit = 1ull << slot;
  observed_ |= bit;
  if (busy(page, s.issued_ns, s.completed_ns)) busy_ |= bit;
  s.issued_ns = page.issued_ns;
  s.completed_ns = page.completed_ns;
}

void GpuSharing::publish(tandem_shm_header* shm) {
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
    uint64_t bit = 1ull << i;
    if (!(observed_ & bit)) continue;
    bool others = (busy_ & ~bit) != 0;
    tandem_slot& s = shm->slots[i];
    if (others) __atomic_fetch_add(&s.others_busy_ticks, 1u, __ATOMIC_RELAXED);
    __atomic_store_n(&s.others_busy, others ? 1u : 0u, __ATOMIC_RELEASE);
  }
  observed_ = busy_ = 0;
}

}  // namespace tandem::scheduler
