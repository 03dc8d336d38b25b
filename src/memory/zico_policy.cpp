#include "zico_policy.h"

#include <algorithm>
#include <set>

namespace tandem::scheduler {

uint64_t predicted_use(const RunningJob& job, uint64_t after_ns) {
  const MemoryCurve& c = *job.curve;
  switch (job.state) {
    case RunningJob::State::held: return c.last_bytes();
    case RunningJob::State::unknown:
    case RunningJob::State::rising: return std::max(c.peak_bytes(), c.last_bytes());
    case RunningJob::State::running: break;
  }
  // Later than its curve (slowed down beside the others): it keeps what it holds until its
  // backward pass is seen; nothing is predicted to come free.
  if (c.in_iteration() && job.since_start_ns >= c.active_ns()) return c.last_bytes();
  return c.at(job.since_start_ns + static_cast<uint64_t>(static_cast<double>(after_ns) * job.speed));
}

std::optional<uint64_t> time_shift(const MemoryCurve& job, const std::vector<RunningJob>& others, uint64_t budget_bytes,
                                   uint64_t horizon_ns) {
  const uint64_t bin = job.bin_ns();
  const uint64_t active = std::max(job.active_ns(), bin);
  for (uint64_t shift = 0; shift <= horizon_ns; shift += bin) {
    bool fits = true;
    for (uint64_t x = 0; x < active && fits; x += bin) {
      uint64_t sum = job.at(x);
      for (const RunningJob& o : others) sum += predicted_use(o, shift + x);
      fits = sum <= budget_bytes;
    }
    if (fits) return shift;
  }
  return std::nullopt;
}

RunningJob ZicoPolicy::running_view(const Job& j, uint64_t now_ns) const {
  RunningJob r;
  r.curve = &j.curve;
  if (!j.curve.learned() || !holds_others(j)) {
    r.state = RunningJob::State::unknown;  // at its peak throughout
  } else if (j.curve.in_iteration() && j.curve.last_bytes() < j.curve.iteration_peak_bytes()) {
    // In its backward pass: placed on its curve by what it still holds, not by the time since
    // its start (slowed by the other jobs or the host, it would be predicted to free memory it
    // still holds: a job let start beside it then ran out of memory).
    // It keeps the pace it has had since its start, if slower than its curve's.
    r.state = RunningJob::State::running;
    r.since_start_ns = j.curve.falling_position_ns(j.curve.last_bytes());
    uint64_t elapsed = now_ns - j.curve.started_ns();
    if (elapsed > r.since_start_ns) r.speed = static_cast<double>(r.since_start_ns) / static_cast<double>(elapsed);
  } else if (j.curve.in_iteration() || j.last_grant_ns > j.curve.started_ns() || j.last_grant_ns == now_ns) {
    r.state = RunningJob::State::rising;  // allowed, or in its forward pass
  } else {
    r.state = RunningJob::State::held;  // it cannot start without a permit
  }
  return r;
}

uint64_t ZicoPolicy::trough_to_publish(const Job& j, bool gating) const {
  if (!gating) return 0;
  if (j.curve.learned()) return j.curve.threshold_bytes();
  return profiling(j) ? UINT64_MAX : 0;  // profiling: its next allocation waits for the others' boundary
}

void ZicoPolicy::step(uint64_t now_ns, const std::vector<ZicoSample>& samples, uint64_t budget_bytes,
                      std::vector<ZicoDecision>& decisions) {
  decisions.clear();
  // Newcomers hold the others for at most profile_ns_ of every window, together: a job
  // that re-registers is a newcomer again, but the allowance is the GPU's.
  if (!profile_window_ns_ || now_ns - profile_window_ns_ >= kProfileWindowNs) {
    profile_window_ns_ = now_ns;
    profile_hold_ns_ = 0;
  }
  bool profiled = gating_ && std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& e) {
    return !e.second.curve.learned() && holds_others(e.second);
  });
  if (profiled && last_step_ns_ && now_ns > last_step_ns_) profile_hold_ns_ += now_ns - last_step_ns_;
  last_step_ns_ = now_ns;
  newcomers_may_hold_ = profile_hold_ns_ < profile_ns_;
  std::set<int> present;
  for (const ZicoSample& s : samples) present.insert(s.slot);
  std::erase_if(jobs_, [&](const auto& entry) { return !present.count(entry.first); });

  for (const ZicoSample& s : samples) {
    auto it = jobs_.find(s.slot);
    if (it == jobs_.end() || it->second.generation != s.generation) {
      if (it != jobs_.end()) jobs_.erase(it);
      it = jobs_.emplace(s.slot, Job(period_ns_)).first;
      it->second.generation = s.generation;
      it->second.first_seen_ns = now_ns;
      it->second.permits = s.starts;
    }
    Job& j = it->second;
    bool was_in_iteration = j.curve.in_iteration(), was_learned = j.curve.learned();
    j.curve.add(now_ns, s.bytes_in_use);
    // An iteration that began while it had to wait for a permit (its threshold published; a
    // profiling job waits once, at its first allocation): under one, or not (the start the
    // curve took is the permit's when the rise followed it).
    if (gating_ && was_learned && !was_in_iteration && j.curve.in_iteration()) {
      ++j.rises;
      if (!j.last_grant_ns || j.curve.started_ns() != j.last_grant_ns) ++j.unpermitted;
    }
    // Waiting for a permit not given yet (one given and not yet taken does not count).
    j.waiting = s.waiting && static_cast<int32_t>(j.permits - s.starts) <= 0;
    if (!j.waiting) j.waiting_since_ns = 0;
    else if (!j.waiting_since_ns) j.waiting_since_ns = now_ns;
    // Profiling that shows no iterations in time: a constant use, never held.
    uint64_t profiling_since = j.profile_granted_ns ? j.profile_granted_ns : j.first_seen_ns;
    if (profiling(j) && now_ns - profiling_since > profile_ns_ && (j.profile_granted_ns || !j.waiting))
      j.unshaped = true;
  }
  const bool gating = jobs_.size() >= 2;
  gating_ = gating;
  std::map<int, size_t> index;  // slot -> its decision
  for (const ZicoSample& s : samples) {
    index[s.slot] = decisions.size();
    decisions.push_back({s.slot, trough_to_publish(jobs_.at(s.slot), gating), gating, false, 0});
  }

  // The longest-waiting first.
  std::vector<std::pair<uint64_t, int>> waiting;
  for (const auto& [slot, j] : jobs_)
    if (j.waiting) waiting.emplace_back(j.waiting_since_ns, slot);
  std::sort(waiting.begin(), waiting.end());
  bool profile_running = std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& e) {
    return profiling(e.second) && e.second.profile_granted_ns;
  });
  auto grant = [&](int slot, Job& j) {
    ZicoDecision& d = decisions[index.at(slot)];
    d.grant = true;
    d.permits = ++j.permits;
    j.curve.mark_start(now_ns);
    j.last_grant_ns = now_ns;
    ++j.grants;
    if (now_ns - j.waiting_since_ns > period_ns_) ++j.shifted;
    j.waiting = false;
  };

  for (const auto& [since, slot] : waiting) {
    Job& j = jobs_.at(slot);
    if (!gating) {
      grant(slot, j);
      continue;
    }
    if (profiling(j)) {
      // Its first iteration runs alone: once every other job is between iterations (and stays
      // there, having no permit until this one is learned).
      bool others_between = !profile_running;
      for (const auto& [k, other] : jobs_) {
        RunningJob::State st = running_view(other, now_ns).state;
        if (k != slot && (st == RunningJob::State::running || st == RunningJob::State::rising)) others_between = false;
      }
      for (const auto& [k, other] : jobs_)
        if (k != slot && !other.curve.learned() && holds_others(other) && other.curve.in_iteration()) others_between = false;
      if (others_between) {
        j.profile_granted_ns = now_ns;
        profile_running = true;
        grant(slot, j);
      }
      continue;
    }
    if (profile_running) continue;  // held until the newcomer's curve is known
    std::vector<RunningJob> others, constants;  // the jobs it may wait for; the others, at their peaks
    uint64_t horizon = 100'000'000ull;
    bool all_held = true;
    uint64_t constant = 0;
    for (const auto& [k, other] : jobs_) {
      if (k == slot) continue;
      RunningJob view = running_view(other, now_ns);
      if (!holds_others(other)) {
        constants.push_back(view);
        constant += predicted_use(view, 0);
        continue;
      }
      others.push_back(view);
      all_held = all_held && view.state == RunningJob::State::held;
      horizon = std::max({horizon, 2 * other.curve.active_ns(), 2 * other.curve.period_ns()});
    }
    // Beside the constant claims its iteration never fits, whatever the others do: waiting
    // cannot help (a job claiming the whole GPU held every other for ever), so they are left
    // out and it is shifted against the jobs it may wait for only.
    if (j.curve.peak_bytes() + constant <= budget_bytes) others.insert(others.end(), constants.begin(), constants.end());
    std::optional<uint64_t> shift = time_shift(j.curve, others, budget_bytes, horizon);
    j.last_shift_ns = shift.value_or(horizon);
    // No shift makes it fit (its own peak beside the others' troughs is over the budget):
    // one iteration at a time, as Zico falls back to, once all the others are between them.
    if ((shift && *shift == 0) || (!shift && all_held)) grant(slot, j);
  }
}

std::vector<ZicoJobStatus> ZicoPolicy::status() const {
  std::vector<ZicoJobStatus> out;
  for (const auto& [slot, j] : jobs_) {
    ZicoJobStatus s;
    s.slot = slot;
    s.learned = j.curve.learned();
    s.profiling = profiling(j) && j.profile_granted_ns;
    s.unshaped = j.unshaped;
    s.waiting = j.waiting;
    s.trough_bytes = j.curve.trough_bytes();
    s.peak_bytes = j.curve.peak_bytes();
    s.period_ns = j.curve.period_ns();
    s.active_ns = j.curve.active_ns();
    s.iterations = j.curve.iterations();
    s.grants = j.grants;
    s.shifted = j.shifted;
    s.last_shift_ns = j.last_shift_ns;
    s.unruly = j.unruly();
    s.unpermitted = j.unpermitted;
    out.push_back(s);
  }
  return out;
}

const MemoryCurve* ZicoPolicy::curve(int slot) const {
  auto it = jobs_.find(slot);
  return it == jobs_.end() ? nullptr : &it->second.curve;
}

}  // namespace tandem::scheduler
