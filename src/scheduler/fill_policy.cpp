#include "fill_policy.h"

#include <algorithm>

namespace tandem::scheduler {

const char* fill_phase_name(FillPhase p) {
  switch (p) {
    case FillPhase::closed: return "closed";
    case FillPhase::conservative: return "conservative";
    case FillPhase::incremental: return "incremental";
    case FillPhase::stable: return "stable";
  }
  return "?";
}

FillPhase FillPolicy::step(GpuPhase gpu, uint64_t now_ns, uint64_t bubble_started_ns,
                           const std::vector<FillerState>& fillers, std::vector<Grant>& grants) {
  grants.clear();
  rate_ = 0;
  if (gpu == GpuPhase::busy) {
    phase_ = FillPhase::closed;
    incremental_steps_ = 0;
    return phase_;
  }
  uint64_t age = now_ns > bubble_started_ns ? now_ns - bubble_started_ns : 0;
  if (age < p_.conservative_ns) {
    phase_ = FillPhase::conservative;
    return phase_;
  }
  if (age >= p_.stable_after_ns) {
    phase_ = FillPhase::stable;
    rate_ = 1.0;
  } else {
    phase_ = FillPhase::incremental;
    rate_ = std::min(1.0, p_.incremental_start + p_.incremental_step * incremental_steps_++);
  }
  size_t wanting = static_cast<size_t>(std::count_if(fillers.begin(), fillers.end(),
                                                     [](const FillerState& f) { return f.wants_work; }));
  if (wanting == 0) return phase_;
  auto budget = static_cast<int64_t>(rate_ * static_cast<double>(p_.period_ns));
  int64_t share = budget / static_cast<int64_t>(wanting);
  int64_t inflight_share = static_cast<int64_t>(p_.max_inflight_ns / wanting);
  for (const FillerState& f : fillers) {
    if (!f.wants_work) continue;
    // Room under the in-flight bound, counting what the filler already holds unspent.
    int64_t room = inflight_share - static_cast<int64_t>(f.inflight_ns) - std::max<int64_t>(f.tokens_ns, 0);
    // Stable: a long, steady bubble; fill up to the in-flight bound at once, since the bound,
    // not the per-period rate, is what limits how long training can be delayed.
    int64_t grant = phase_ == FillPhase::stable ? room : std::min(share, room);
    if (grant > 0) grants.push_back({f.id, grant});
  }
  return phase_;
}

}  // namespace tandem::scheduler
