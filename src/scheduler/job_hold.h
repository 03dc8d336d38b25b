// Holding a node-local training job's collectives on all its ranks together (policy slo;
// docs/slo.md, "Collectives"). A collective cannot be held on one rank alone: its peers would
// wait inside theirs, spinning on their GPUs. So tandemd gives every rank of a job the same
// limit: each may launch NCCL kernels up to number `limit`, none beyond. While no rank's GPU
// has an online request running there is no limit; when one starts, the limit is set to the
// most any rank has launched, so every rank can still reach the collective its fastest peer
// is in, and all of them stop at the next one, a step boundary for data-parallel training.
// A rank seen past the limit (it raced the hold's start, or failed open) raises it for all.
// Pure logic: the server reads the ranks' pages and writes their slots.
#pragma once
#include <cstdint>
#include <vector>

namespace tandem::scheduler {

struct JobRank {
  uint64_t launched = 0;      // NCCL kernels it launched, as its page says (bounded)
  bool request_open = false;  // an online request runs on its GPU and training is gated there
};

class JobHold {
 public:
  // Once per tick with the ranks registered under the job and the count their hellos gave.
  // Returns the value of every rank's collectives_allowed: its n-th NCCL kernel may start
  // while n < the value; 0: no limit.
  uint64_t step(const std::vector<JobRank>& ranks, uint32_t expected);

  bool holding() const { return holding_; }
  uint64_t holds() const { return holds_; }  // holds begun
  uint64_t allowed() const { return allowed_; }

 private:
  bool holding_ = false;
  uint64_t limit_ = 0;    // while holding: the last collective any rank may launch
  uint64_t allowed_ = 0;  // what step() returned last
  uint64_t holds_ = 0;
};

}  // namespace tandem::scheduler
