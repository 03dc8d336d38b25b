// Who may hold training back under policy `slo`, for how long and how often (docs/security.md).
// An online inference client's open request holds every launch of the best-effort job (the
// clients' gates, src/hook/gate.cpp, read the count tandemd publishes in the client's slot),
// and while inference is active the slo policy gates that job at its duty cycle. A client
// writes its own page, so both would last as long as it says a request is open. Two bounds,
// decided here once per tick, before the policy's step:
//
//   stuck   a request open with no begin or end of its client for 4 times its target, and at
//           most kMaxStuckNs whatever the target (a 1 h target must not mean 4 h), is a stuck
//           client's: it holds nothing and keeps inference active no longer than an ended one.
//   floor   in every window of window_ns, the best-effort job keeps at least `floor` of the
//           window's GPU time (the controller's minimum duty cycle, the share it never goes
//           below): requests hold it only while that can still be met in the rest of the
//           window at the duty cycle in force. Once they could not, they hold nothing until the
//           window ends (the job runs at the duty cycle beside them). A client that keeps a
//           request open for ever, refreshing it, holds training at most 1 - floor of each
//           window, in one stretch per window.
// Pure logic, time passed in; the daemon's per-GPU loop (gpu_scheduler.cpp) applies it.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "slo_policy.h"
#include "tandem/shm_abi.h"

namespace tandem::scheduler {

struct RequestHoldParams {
  uint64_t window_ns = 1000000000;  // the floor holds in every window of this length
  double floor = 0.05;              // SloControllerParams::min_duty
};

// The stuck rule: `c` has requests open, and none began or ended for 4 times its target, or
// kMaxStuckNs (a client without a target is stuck at once: its requests never held anything).
constexpr uint64_t kMaxStuckNs = 10000000000ull;
bool request_stuck(const OnlineClient& c, uint64_t now_ns);

class RequestHolds {
 public:
  explicit RequestHolds(RequestHoldParams p = {}) : p_(p) {}

  // Before the policy's step: stuck clients' requests_open becomes 0 in `online` (they count
  // for nothing); returns whether the others' open requests may hold the best-effort job until
  // the next tick, given `duty`, the duty cycle in force.
  bool allow(uint64_t now_ns, std::vector<OnlineClient>& online, double duty);
  // After it: what the best-effort job is given until the next tick: nothing while requests
  // hold it, the duty cycle while `gating`, else the whole GPU.
  void decided(bool gating, bool held, double duty);

  // Stuck requests seen (a client's, each time it became stuck) and the time requests were
  // open but not let hold, for the status.
  uint64_t stuck() const { return stuck_; }
  const RequestHoldParams& params() const { return p_; }
  uint64_t refused_ns() const { return refused_ns_; }
  // The holds' pace in this window, as of the last allow(): when the window began, the time the
  // best-effort job was held (not given the GPU), what the floor allows of the window by then
  // (elapsed x (1 - floor)), and what it allows of the whole window.
  struct Pace {
    uint64_t window_start_ns;
    double held_ns, allowed_by_now_ns, allowed_ns;
  };
  Pace pace() const;

 private:
  RequestHoldParams p_;
  uint64_t window_start_ns_ = 0;
  double given_ns_ = 0;   // GPU time the best-effort job was given in this window
  double share_ = 1.0;    // of the GPU, since the last tick
  bool released_ = false; // requests hold nothing for the rest of this window
  bool refusing_ = false; // requests were open but not let hold, this tick
  uint64_t last_ns_ = 0;
  uint64_t stuck_ = 0, refused_ns_ = 0;
  std::array<uint64_t, TANDEM_MAX_SLOTS> stuck_activity_{};  // per slot: 1 + the activity time found stuck
};

}  // namespace tandem::scheduler
