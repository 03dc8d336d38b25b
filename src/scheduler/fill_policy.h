// How much GPU time fillers may launch each period (SpecInF's three token phases).
//   closed        training is busy: no tokens, and unspent ones are revoked;
//   conservative  the first `conservative_ns` of a bubble: nothing yet (training may resume
//                 at once, and a long kernel must not be disturbed);
//   incremental   then a growing share of each period: start, start + step, ... up to 1;
//   stable        once the bubble has lasted `stable_after_ns` (a long, steady bubble such as
//                 an all-reduce): full rate, each filler topped up to its in-flight share.
// Each period's budget is split equally among the fillers that want work, and no filler may
// have more than its share of `max_inflight_ns` launched but unfinished: when training
// resumes it waits for at most that much filler work.
#pragma once
#include <cstdint>
#include <vector>

#include "bubble_detector.h"

namespace tandem::scheduler {

struct FillParams {
  uint64_t period_ns = 1000000;
  uint64_t conservative_ns = 500000;
  double incremental_start = 0.25;
  double incremental_step = 0.25;
  uint64_t stable_after_ns = 1500000;
  uint64_t max_inflight_ns = 2500000;
};

enum class FillPhase { closed, conservative, incremental, stable };
const char* fill_phase_name(FillPhase p);

struct FillerState {
  int id;
  uint64_t inflight_ns;  // launched, not yet completed (estimated)
  int64_t tokens_ns;     // current unspent balance
  bool wants_work;       // launched recently or is waiting at the gate
};

struct Grant {
  int id;
  int64_t tokens_ns;  // to add this period
};

class FillPolicy {
 public:
  explicit FillPolicy(FillParams p) : p_(p) {}

  FillPhase step(GpuPhase gpu, uint64_t now_ns, uint64_t bubble_started_ns,
                 const std::vector<FillerState>& fillers, std::vector<Grant>& grants);
  FillPhase phase() const { return phase_; }
  // True when unspent tokens must be taken back (training is busy).
  bool revoke() const { return phase_ == FillPhase::closed; }
  // Share of a period granted in the last step (0..1).
  double rate() const { return rate_; }

 private:
  FillParams p_;
  FillPhase phase_ = FillPhase::closed;
  int incremental_steps_ = 0;
  double rate_ = 0;
};

}  // namespace tandem::scheduler
