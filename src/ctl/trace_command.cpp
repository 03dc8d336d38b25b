// tandemctl trace: N seconds of scheduling as a Chrome/Perfetto trace file.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "ctl_common.h"
#include "json_text.h"
#include "terminal_text.h"

namespace tandem::ctl {
namespace {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

int trace_command(const std::string& socket_path, uint64_t span_ns, const std::string& out, bool json) {
  if (span_ns == 0 || out.empty()) usage_error("trace needs --seconds N and --out FILE");
  // The daemon's clock is this machine's CLOCK_MONOTONIC: mark now, wait, fetch what came since.
  ask(socket_path, MessageType::status_request, msg::encode(msg::StatusRequest{}), MessageType::status_reply);
  uint64_t since = monotonic_ns();
  timespec wait{static_cast<time_t>(span_ns / 1000000000ull), static_cast<long>(span_ns % 1000000000ull)};
  while (nanosleep(&wait, &wait) != 0 && errno == EINTR) {
  }
  std::string reply =
      ask(socket_path, MessageType::trace_request, msg::encode(msg::TraceRequest{since}), MessageType::trace_reply);
  nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "tandemctl: malformed trace reply\n");
    return 1;
  }
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json per_gpu = nlohmann::json::object();
  for (auto& [uuid, t] : j["gpus"].items()) {
    per_gpu[uuid] = t["traceEvents"].size();
    for (auto& e : t["traceEvents"]) events.push_back(e);
  }
  FILE* f = std::fopen(out.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "tandemctl: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
    return 1;
  }
  std::string text = json_text(nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}});
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  if (json)
    print_json({{"out", out}, {"seconds", static_cast<double>(span_ns) / 1e9}, {"since_ns", since},
                {"events", events.size()}, {"gpus", per_gpu}});
  else
    print_line("tandemctl: %zu events in %s (open it in ui.perfetto.dev)", events.size(), out.c_str());
  return 0;
}

}  // namespace tandem::ctl
