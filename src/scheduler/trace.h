// A bounded in-memory record of what the scheduler did, served to `tandemctl trace` and
// written as a Chrome/Perfetto trace (training busy and bubble intervals, token grants).
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

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
  // Events in [since_ns, now] as Chrome trace JSON (ui.perfetto.dev opens it).
  std::string chrome_json(uint64_t since_ns, const std::string& gpu) const;

 private:
  mutable std::mutex mutex_;
  std::deque<TraceEvent> events_;
};

}  // namespace tandem::scheduler
