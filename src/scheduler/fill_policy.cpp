#include "fill_policy.h"

#include <algorithm>

namespace tandem::scheduler {

const char* FillPolicy::phase_name(FillPhase p) {
  switch (p) {
    case FillPhase::closed: return "closed";
    case FillPhase::communication: return "communication";
    case FillPhase::conservative: return "conservative";
    case FillPhase::incremental: return "incremental";
    case FillPhase::stable: return "stable";
  }
  return "?";
}

FillPhase FillPolicy::choose_phase(GpuPhase gpu, uint64_t age_ns) const {
  if (gpu == GpuPhase::busy) return FillPhase::closed;
  if (age_ns < p_.conservative_ns) return FillPhase::conservative;
  if (age_ns >= p_.stable_after_ns) return FillPhase::stable;
  return FillPhase::incremental;
}

FillPhase FillPolicy::step(GpuPhase gpu, bool communicating, uint64_t now_ns, uint64_t bubble_started_ns, uint64_t predicted_end_ns,
                           const std::vector<FillerState>& fillers, std::vector<Grant>& grants) {
  grants.clear();
  // The ramp starts over in every bubble; a new start time means a new bubble even if no
  // busy step was seen in between.
  if (gpu == GpuPhase::busy || bubble_started_ns != bubble_started_ns_) incremental_steps_ = 0;
  bubble_started_ns_ = bubble_started_ns;
  uint64_t age = now_ns > bubble_started_ns ? now_ns - bubble_started_ns : 0;
  phase_ = choose_phase(gpu, age);
  if (phase_ != FillPhase::closed && communicating && !p_.fill_during_comm) phase_ = FillPhase::communication;
  switch (phase_) {
    case FillPhase::closed:
    case FillPhase::communication:
    case FillPhase::conservative: rate_ = 0; return phase_;
    case FillPhase::incremental:
      rate_ = std::min(1.0, p_.incremental_start + p_.incremental_step * incremental_steps_++);
      break;
    case FillPhase::stable: rate_ = 1.0; break;
  }
  // Work still in flight when training resumes delays training by that much: near the
  // bubble's predicted end, allow only what can finish before it. Beside a collective
  // (fill_during_comm) at least half the bound: its end is not predictable from the bubbles
  // (DDP's first buckets' all-reduces take a millisecond, its last several, and a peer rank
  // can hold any of them), and under MPS the filler work in flight when it ends shares the SMs
  // with the training work queued behind it rather than going first.
  int64_t remaining = predicted_end_ns > now_ns ? static_cast<int64_t>(predicted_end_ns - now_ns) : 0;
  int64_t bound = static_cast<int64_t>(std::min(p_.max_inflight_ns, inflight_limit_ns_));
  if (predicted_end_ns) bound = std::min<int64_t>(bound, communicating ? std::max<int64_t>(remaining, bound / 2) : remaining);
  // A whole long launch only under the fill policy's own bound (policy slo's window is tighter).
  if (inflight_limit_ns_ != UINT64_MAX) remaining = 0;
  grant_shares(fillers, static_cast<int64_t>(rate_ * static_cast<double>(p_.period_ns)), bound, phase_ == FillPhase::stable,
               remaining, grants, turn_++);
  return phase_;
}

void grant_shares(const std::vector<FillerState>& clients, int64_t rate_ns, int64_t inflight_bound, bool top_up,
                  int64_t remaining_ns, std::vector<Grant>& grants, size_t first) {
  auto wanting = std::count_if(clients.begin(), clients.end(), [](const FillerState& f) { return f.wants_work; });
  if (wanting == 0) return;
  auto n = static_cast<int64_t>(wanting);
  int64_t share = rate_ns / n;
  int64_t inflight_share = inflight_bound / n;
  // What the bubble can still hold after every client's queued work and unspent tokens.
  int64_t whole_room = remaining_ns;
  for (const FillerState& f : clients)
    whole_room -= static_cast<int64_t>(f.inflight_ns) + std::max<int64_t>(f.tokens_ns, 0);
  // One whole launch a period, longer than its client's share: the first that fits, looked for
  // from `first` on.
  size_t whole = clients.size();
  for (size_t k = 0; k < clients.size() && rate_ns > 0; ++k) {
    size_t i = (first + k) % clients.size();
    const FillerState& f = clients[i];
    auto want = static_cast<int64_t>(f.want_ns);
    if (f.wants_work && want > inflight_share && want - std::max<int64_t>(f.tokens_ns, 0) <= whole_room) {
      whole = i;
      break;
    }
  }
  for (size_t i = 0; i < clients.size(); ++i) {
    const FillerState& f = clients[i];
    if (!f.wants_work) continue;
    int64_t tokens = std::max<int64_t>(f.tokens_ns, 0);
    int64_t room = inflight_share - static_cast<int64_t>(f.inflight_ns) - tokens;
    int64_t amount = top_up ? room : std::min(share, room);
    if (i == whole) amount = static_cast<int64_t>(f.want_ns) - f.tokens_ns;  // pays a debt too
    if (amount > 0) grants.push_back({f.id, amount});
  }
}

}  // namespace tandem::scheduler
