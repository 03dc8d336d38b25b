#include "trace_json.h"

namespace tandem::scheduler {

nlohmann::json chrome_trace(const Trace& trace, uint64_t since_ns, const std::string& gpu) {
  nlohmann::json events = nlohmann::json::array();
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  uint64_t bubble_start = 0;
  for (const TraceEvent& e : trace.events_since(since_ns)) {
    switch (e.kind) {
      case 'B': bubble_start = e.t_ns; break;
      case 'E':
        if (bubble_start)
          events.push_back({{"name", "bubble"}, {"ph", "X"}, {"ts", us(bubble_start)},
                            {"dur", us(e.t_ns - bubble_start)}, {"pid", "GPU " + gpu}, {"tid", "training"}});
        bubble_start = 0;
        break;
      case 'G':
      case 'R':
        events.push_back({{"name", e.kind == 'G' ? "tokens granted" : "tokens revoked"}, {"ph", "i"},
                          {"s", "t"}, {"ts", us(e.t_ns)}, {"pid", "GPU " + gpu},
                          {"tid", "filler " + std::to_string(e.pid)}, {"args", {{"ns", e.value}}}});
        break;
      case 'Z':
        events.push_back({{"name", "iteration start allowed (Zico)"}, {"ph", "i"}, {"s", "t"}, {"ts", us(e.t_ns)},
                          {"pid", "GPU " + gpu}, {"tid", "training " + std::to_string(e.pid)}});
        break;
    }
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace tandem::scheduler
