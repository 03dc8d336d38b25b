// Zico's scrooge scheduler (docs/zico.md) for the training jobs of one GPU: each job's memory
// over its iteration is learned (memory_curve.h); a job that reaches an iteration boundary
// waits there (the hook holds its first allocation) until tandemd predicts that starting now
// keeps the jobs' summed memory within the budget at every moment of the iteration, which is
// the same as delaying its start by the smallest time shift that does. Jobs whose forward
// passes (memory rising) would meet are thereby shifted so that one's peak meets the other's
// backward pass (memory falling).
//
// Profiling (Zico's first phase): a job whose curve is not known yet waits at its first
// iteration until the others are between iterations, then runs while they wait, until its
// curve is learned (a few iterations). A job that shows no iterations within profile_ns
// (TANDEM_ZICO_PROFILE_MS) is taken as a constant use at its peak and never held again.
// With one training job on the GPU nothing is held.
//
// What a job claims is its own page (docs/security.md), so a job holds the others only by what
// it has shown: a learned curve whose iterations start under permits (a job that starts most
// of its iterations without one, kUnruly of them or more, does not wait as the others do), or a
// newcomer's profiling once it waited for it, all newcomers of the GPU together for at most
// profile_ns in every kProfileWindowNs (re-registering does not renew it). Any other job is
// a constant use at its peak: the others are predicted beside it but never wait for it, and
// when an iteration cannot fit beside such constants at all (a job claiming the whole GPU),
// waiting could not help: they are left out of its prediction, and it is shifted against the
// jobs it may wait for only. tandemd bounds each claim by the GPU's size.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "memory_curve.h"

namespace tandem::scheduler {

// What a job will use from now on, for the prediction.
struct RunningJob {
  enum class State {
    held,     // between iterations, waiting for a permit: stays at its current use
    rising,   // allowed to start, or in its forward pass: at its peak until seen falling (how
              // fast it rises and when it turns depend on its speed now, which the curve,
              // learned at another moment, does not know)
    running,  // at `since_start_ns` on its curve (its backward pass): follows the curve
    unknown,  // no curve (profiling, or no iterations seen): its peak, throughout
  };
  const MemoryCurve* curve = nullptr;
  State state = State::held;
  uint64_t since_start_ns = 0;
  double speed = 1.0;  // running: how fast it moves along its curve now (1: as learned)
};

// The use of `job` predicted `after_ns` from now.
uint64_t predicted_use(const RunningJob& job, uint64_t after_ns);

// The smallest delay (a multiple of the curve's bin, at most `horizon_ns`) after which an
// iteration of `job` (its curve learned) fits beside `others` within `budget_bytes` at every
// bin of it; nullopt when none does within the horizon.
std::optional<uint64_t> time_shift(const MemoryCurve& job, const std::vector<RunningJob>& others, uint64_t budget_bytes,
                                   uint64_t horizon_ns);

// One training client, as tandemd read it this period.
struct ZicoSample {
  int slot = -1;
  uint32_t generation = 0;
  uint64_t bytes_in_use = 0;
  uint32_t starts = 0;   // iteration starts the client made under a permit
  bool waiting = false;  // an allocation waits at an iteration boundary
};

// What tandemd writes into the client's slot.
struct ZicoDecision {
  int slot = -1;
  uint64_t trough_bytes = 0;  // 0: no waiting; UINT64_MAX: its next allocation waits
  bool shared = false;        // time-shifted against another job: its pool gives idle chunks back at once
  bool grant = false;         // raise its permits to `permits` and wake it
  uint32_t permits = 0;
};

// What `tandemctl status` shows of a job.
struct ZicoJobStatus {
  int slot = -1;
  bool learned = false, profiling = false, unshaped = false, waiting = false, unruly = false;
  uint64_t trough_bytes = 0, peak_bytes = 0, period_ns = 0, active_ns = 0, iterations = 0;
  uint64_t grants = 0, shifted = 0;  // permits given; of them, after a wait
  uint64_t unpermitted = 0;          // iterations it started without a permit while the GPU was shared
  uint64_t last_shift_ns = 0;        // the last predicted time shift of a waiting start
};

class ZicoPolicy {
 public:
  // `profile_ns`: TANDEM_ZICO_PROFILE_MS, a newcomer's time to show its iterations and the
  // newcomers' hold allowance in every kProfileWindowNs.
  explicit ZicoPolicy(uint64_t period_ns, uint64_t profile_ns = kDefaultProfileNs)
      : period_ns_(period_ns), profile_ns_(profile_ns) {}

  // One period: learns from the samples and decides who may start an iteration.
  void step(uint64_t now_ns, const std::vector<ZicoSample>& jobs, uint64_t budget_bytes,
            std::vector<ZicoDecision>& decisions);
  std::vector<ZicoJobStatus> status() const;
  const MemoryCurve* curve(int slot) const;

  static constexpr uint64_t kDefaultProfileNs = 5'000'000'000ull;
  static constexpr uint64_t kProfileWindowNs = 60'000'000'000ull;
  static constexpr uint32_t kUnruly = 3;
  // Time newcomers held the others in the current window (status).
  uint64_t profile_hold_ns() const { return profile_hold_ns_; }

 private:
  struct Job {
    explicit Job(uint64_t bin_ns) : curve(bin_ns) {}
    uint32_t generation = 0;
    MemoryCurve curve;
    uint64_t first_seen_ns = 0;
    uint64_t profile_granted_ns = 0;  // 0: not yet
    bool unshaped = false;
    uint64_t waiting_since_ns = 0;    // 0: not waiting
    uint64_t last_grant_ns = 0;
    uint32_t permits = 0;
    bool waiting = false;
    uint64_t grants = 0, shifted = 0, last_shift_ns = 0;
    uint32_t rises = 0, unpermitted = 0;  // iterations seen starting while the GPU was shared; without a permit
    bool unruly() const { return unpermitted >= kUnruly && 2 * unpermitted > rises; }
  };
  bool profiling(const Job& j) const { return !j.curve.learned() && !j.unshaped && newcomers_may_hold_; }
  // A job the others may wait for: a learned curve it keeps to, or a newcomer let profile (it
  // waited for that; one that never waits has shown nothing to wait for).
  bool holds_others(const Job& j) const {
    return (j.curve.learned() && !j.unruly()) || (profiling(j) && j.profile_granted_ns);
  }
  RunningJob running_view(const Job& j, uint64_t now_ns) const;
  uint64_t trough_to_publish(const Job& j, bool gating) const;

  uint64_t period_ns_;
  uint64_t profile_ns_;  // a newcomer's time to show iterations; the newcomers' hold per window
  std::map<int, Job> jobs_;  // by slot
  bool gating_ = false;      // at the last step: permits were needed
  uint64_t last_step_ns_ = 0, profile_window_ns_ = 0, profile_hold_ns_ = 0;
  bool newcomers_may_hold_ = true;
};

}  // namespace tandem::scheduler
