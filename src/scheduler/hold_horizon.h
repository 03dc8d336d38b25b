// Policy fill with online inference: which requests that arrive while training computes hold
// it (TANDEM_FILL_ONLINE_HOLD) and which wait for the bubble that is due (SpecInF's bubble
// prediction). Holding every request until a second's holds were spent left the requests of
// the rest of that second to wait up to a whole compute phase, and the p95 was theirs. A
// request whose bubble is due within the horizon waits for it (it costs training nothing
// there); the others hold training. The horizon paces the holds through the second: it is a
// base, plus the hold time used beyond the second's part so far (used early, the next requests
// near a bubble wait for it; used slowly, they hold). The base follows the seconds: one whose
// holds used more than 90% of the part lengthens it by a sixteenth of the compute phase, one
// that used less than 60% shortens it as much. So the holds go to the requests that would
// otherwise wait the longest, and last the second.
// Pure logic, time passed in; the daemon's per-GPU loop (gpu_scheduler.cpp) applies it.
#pragma once
#include <cstdint>

#include "request_holds.h"

namespace tandem::scheduler {

class HoldHorizon {
 public:
  // Once per tick, with holds in use: the holds' pace in their window, and training's learned
  // compute phase (0: not learned yet).
  void tick(const RequestHolds::Pace& pace, uint64_t busy_ns);
  // Whether a request now waits for the bubble rather than holding training: training's
  // compute phase began at `busy_started_ns` and is expected to last `busy_ns`. One overdue by
  // more than the horizon holds again: the prediction was wrong.
  bool bubble_due(uint64_t now_ns, uint64_t busy_started_ns, uint64_t busy_ns) const;
  uint64_t horizon_ns() const { return horizon_ns_; }
  uint64_t base_ns() const { return base_ns_; }

 private:
  uint64_t window_start_ns_ = 0;                   // of the holds' window seen last
  double last_held_ns_ = 0, last_allowed_ns_ = 0;  // the window's, at the last tick
  uint64_t base_ns_ = 0, horizon_ns_ = 0;
};

}  // namespace tandem::scheduler
