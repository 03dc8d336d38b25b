// A bounded in-memory record of what the scheduler did (training busy and bubble intervals,
// token grants), served to `tandemctl trace` as a Chrome/Perfetto trace by the daemon
// (src/daemon/trace_json.h).
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace tandem::scheduler {

struct TraceEvent {
  uint64_t t_ns;
  char kind;      // 'B' bubble began, 'E' bubble ended, 'G' tokens granted, 'R' revoked,
                  // 'Z' a training iteration allowed to start (Zico)
  int32_t pid;    // the filler for G/R, 0 otherwise
  int64_t value;  // tokens for G/R
};

class Trace {
 public:
  static constexpr size_t kMaxEvents = 200000;
  void add(const TraceEvent& e);
  // The events at or after `since_ns`, oldest first.
  std::vector<TraceEvent> events_since(uint64_t since_ns) const;

 private:
  mutable std::mutex mutex_;
  std::deque<TraceEvent> events_;
};

}  // namespace tandem::scheduler
