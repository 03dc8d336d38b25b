#include "request_holds.h"

#include <algorithm>

namespace tandem::scheduler {

bool request_stuck(const OnlineClient& c, uint64_t now_ns) {
  if (c.requests_open == 0) return false;
  uint64_t stuck_after = std::min(4 * c.slo_ns, kMaxStuckNs);
  return now_ns >= c.activity_ns + stuck_after;
}

bool RequestHolds::allow(uint64_t now_ns, std::vector<OnlineClient>& online, double duty) {
  // What the last tick decided, over the time since (at most a window, after a stall).
  uint64_t elapsed = last_ns_ && now_ns > last_ns_ ? std::min<uint64_t>(now_ns - last_ns_, p_.window_ns) : 0;
  last_ns_ = now_ns;
  given_ns_ += static_cast<double>(elapsed) * share_;
  if (refusing_) refused_ns_ += elapsed;
  bool open = false;
  for (OnlineClient& c : online) {
    if (request_stuck(c, now_ns)) {
      auto slot = static_cast<size_t>(c.id);
      if (slot < stuck_activity_.size() && stuck_activity_[slot] != c.activity_ns + 1) {
        stuck_activity_[slot] = c.activity_ns + 1;  // + 1: an activity time of 0 is one too
        ++stuck_;
      }
      c.requests_open = 0;
    }
    open = open || c.requests_open > 0;
  }
  if (!window_start_ns_ || now_ns - window_start_ns_ >= p_.window_ns) {
    window_start_ns_ = now_ns;
    given_ns_ = 0;
    released_ = false;
  }
  // Holding now leaves the rest of the window, at the duty cycle, to make up the floor.
  uint64_t left = window_start_ns_ + p_.window_ns - now_ns;
  if (!released_ && given_ns_ + duty * static_cast<double>(left) < p_.floor * static_cast<double>(p_.window_ns))
    released_ = true;
  refusing_ = open && released_;
  return !released_;
}

RequestHolds::Pace RequestHolds::pace() const {
  double elapsed = static_cast<double>(last_ns_ - window_start_ns_);
  double part = 1.0 - p_.floor;
  return {window_start_ns_, elapsed - given_ns_, elapsed * part, static_cast<double>(p_.window_ns) * part};
}

void RequestHolds::decided(bool gating, bool held, double duty) { share_ = !gating ? 1.0 : held ? 0.0 : duty; }

}  // namespace tandem::scheduler
