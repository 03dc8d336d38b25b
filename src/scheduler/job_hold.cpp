#include "job_hold.h"

#include <algorithm>

namespace tandem::scheduler {

uint64_t JobHold::step(const std::vector<JobRank>& ranks, uint32_t expected) {
  uint64_t most = 0;
  bool request = false;
  for (const JobRank& r : ranks) {
    most = std::max(most, r.launched);
    request = request || r.request_open;
  }
  // Only a complete job is held: a rank not registered (yet, or any more) could not be held,
  // and would wait inside a collective for peers held here.
  if (expected < 2 || ranks.size() != expected || !request) {
    holding_ = false;
    return allowed_ = 0;
  }
  if (!holding_) {
    holding_ = true;
    ++holds_;
    limit_ = most;
  }
  limit_ = std::max(limit_, most);
  return allowed_ = limit_ + 1;
}

}  // namespace tandem::scheduler
