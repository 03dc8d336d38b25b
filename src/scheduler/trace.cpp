#include "trace.h"

namespace tandem::scheduler {

void Trace::add(const TraceEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(e);
  if (events_.size() > kMaxEvents) events_.pop_front();
}

std::vector<TraceEvent> Trace::events_since(uint64_t since_ns) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events_)
    if (e.t_ns >= since_ns) out.push_back(e);
  return out;
}

}  // namespace tandem::scheduler
