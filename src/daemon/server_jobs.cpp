// Node-local training jobs under policy slo: tandemd holds a job's collectives on all its
// ranks together while an online request runs on any of their GPUs (job_hold.h).
#include "futex.h"
#include "server.h"

namespace tandem::scheduler {

void Server::hold_collectives() {
  // The ranks of each job, in connection order. Jobs are rare: one pass over the clients.
  std::map<std::string, std::vector<const Client*>> members;
  for (const auto& [id, c] : registry_.clients())
    if (!c.job.empty() && c.slot >= 0 && !c.closing) members[c.job].push_back(&c);
  for (auto it = jobs_.begin(); it != jobs_.end();) it = members.count(it->first) ? std::next(it) : jobs_.erase(it);
  for (const auto& [job, ranks] : members) {
    job_ranks_.clear();
    uint32_t expected = ranks.front()->job_ranks;
    for (const Client* c : ranks) {
      GpuScheduler& g = *gpus_.at(c->gpu);
      job_ranks_.push_back({g.segment().view(c->slot).v.collectives_launched, g.request_running()});
      if (c->job_ranks != expected) expected = 0;  // the ranks disagree on their number: never held
    }
    uint64_t allowed = jobs_[job].step(job_ranks_, expected);
    for (const Client* c : ranks) {
      tandem_slot& s = gpus_.at(c->gpu)->segment().shm()->slots[c->slot];
      uint64_t before = __atomic_exchange_n(&s.collectives_allowed, allowed, __ATOMIC_ACQ_REL);
      if (before && (!allowed || allowed > before)) futex_bump_and_wake(&s.wake);  // released, or further
    }
  }
}

nlohmann::json Server::jobs_json() const {
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, std::pair<uint32_t, uint32_t>> seen;  // job -> (ranks registered, expected)
  for (const auto& [id, c] : registry_.clients())
    if (!c.job.empty() && c.slot >= 0) {
      auto& [registered, expected] = seen[c.job];
      ++registered;
      expected = c.job_ranks;
    }
  for (const auto& [job, hold] : jobs_) {
    auto [registered, expected] = seen.count(job) ? seen.at(job) : std::pair<uint32_t, uint32_t>{0, 0};
    out.push_back({{"job", job}, {"ranks", registered}, {"expected_ranks", expected},
                   {"holding", hold.holding()}, {"holds", hold.holds()},
                   {"collectives_allowed", hold.allowed()}});
  }
  return out;
}

}  // namespace tandem::scheduler
