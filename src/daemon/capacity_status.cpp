#include "capacity_status.h"

#include <algorithm>

#include "slo_status.h"

namespace tandem::scheduler {

nlohmann::json capacity_status(const GpuScheduler& g) {
  const GpuCapacity& c = g.capacity();
  GpuSegment& segment = const_cast<GpuScheduler&>(g).segment();
  const tandem_shm_header* shm = segment.shm();
  uint64_t training_peak = 0;
  uint32_t online = 0, measured = 0;
  double headroom = 1;
  for (uint32_t i = 0; shm && i < TANDEM_MAX_SLOTS; ++i) {
    const tandem_slot& s = shm->slots[i];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) continue;
    const tandem_client_page& v = segment.view(static_cast<int>(i)).v;  // bounded (client_view.h)
    if (s.role == TANDEM_ROLE_TRAINING) training_peak += v.peak_bytes;
    if (s.role != TANDEM_ROLE_INFERENCE) continue;
    ++online;
    if (!v.slo_us || !v.latency_samples) continue;  // no target, or no request measured lately
    ++measured;
    const double target_ns = static_cast<double>(v.slo_us) * 1e3;
    headroom = std::min(headroom, (target_ns - static_cast<double>(v.latency_ns)) / target_ns);
  }
  const bool slo = g.policy() == TANDEM_POLICY_SLO;
  nlohmann::json out = {{"measured_s", c.measured_s()},
                        {"bubble_share", c.bubble_share()},
                        {"bubble_share_long", c.bubble_share_long()},
                        {"free_share_long", c.free_share_long()},
                        {"fillers", c.fillers()},
                        {"pressure", c.pressure()},
                        {"policy", slo ? "slo" : "fill"},
                        {"memory_total_bytes", shm ? shm->gpu_total_bytes : 0},
                        {"training_peak_bytes", training_peak},
                        {"online", {{"clients", online}, {"measured", measured},
                                    {"headroom", measured ? nlohmann::json(headroom) : nlohmann::json(nullptr)}}}};
  if (slo) {
    const SloPolicy& p = g.slo();
    out["online"]["active"] = p.active();
    out["online"]["training_duty"] = p.duty();
    out["online"]["saturated"] = p.controller().saturated();
    out["online"]["below_floor"] = slo_floor_status(g, p)["below_floor"];
  }
  return out;
}

}  // namespace tandem::scheduler
