// tandemctl status: what the daemon sees (GPUs, bubbles, clients, tokens), as a table or its
// status document.
#include <cstdio>
#include <string>

#include "ctl_common.h"
#include "terminal_text.h"

namespace tandem::ctl {
namespace {

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

}  // namespace

int status_command(const std::string& socket_path, bool json) {
  if (json) {  // the daemon's document as it sent it (docs/scheduler.md)
    std::string document =
        ask(socket_path, MessageType::status_request, msg::encode(msg::StatusRequest{}), MessageType::status_reply);
    std::printf("%s\n", document.c_str());
    return 0;
  }
  nlohmann::json j = ask_status(socket_path);
  const auto& d = j["daemon"];
  print_line("tandemd %s  pid %d  policy %s  socket %s  up %.1f s", d["version"].get<std::string>().c_str(),
             d["pid"].get<int>(), d["policy"].get<std::string>().c_str(), d["socket"].get<std::string>().c_str(),
             d["uptime_s"].get<double>());
  if (d.value("metrics", std::string()) != "")  // tandemd --metrics (docs/metrics.md)
    print_line("metrics http://%s/metrics", d["metrics"].get<std::string>().c_str());
  if (d.contains("holds") && d["holds"].is_object()) {  // what clients made it hold (docs/scheduler.md)
    const auto& h = d["holds"];
    print_line("holds %llu connections, %llu GPU states, %llu pool chunks, %llu passed fds, %llu processes' "
               "orphaned chunks, %.1f KiB of unread replies",
               h.value("clients", 0ull), h.value("gpus", 0ull), h.value("pool_chunks", 0ull),
               h.value("passed_fds", 0ull), h.value("orphan_processes", 0ull), h.value("reply_bytes", 0.0) / 1024);
  }
  print_line("%-8s %-6s %-6s %-16s %-10s %-12s %s", "PID", "UID", "GID", "ROLE", "CONNECTED", "TRUST", "CONTAINER");
  for (const auto& c : j["clients"])
    print_line("%-8d %-6d %-6d %-16s %-10s %-12s %s", c["pid"].get<int>(), c["uid"].get<int>(), c.value("gid", -1),
               c["role"].get<std::string>().c_str(), (seconds_text(c["connected_s"].get<double>())).c_str(),
               c.value("trust_domain", std::string("-")).c_str(), container_text(c).c_str());
  if (j["clients"].empty()) print_line("(no clients)");
  // Node-local training jobs whose collectives tandemd holds on all ranks together (docs/slo.md).
  if (j.contains("jobs") && j["jobs"].is_array())
    for (const auto& job : j["jobs"])
      print_line("job %s: %u of %u ranks, collectives %s, %llu holds", job.value("job", std::string()).c_str(),
                 job.value("ranks", 0u), job.value("expected_ranks", 0u), job.value("holding", false) ? "held" : "free",
                 job.value("holds", 0ull));
  for (const auto& g : j["gpus"]) {
    std::fputc('\n', stdout);  // a blank line before each GPU
    print_line("GPU %s: %s, fill %s, %llu bubbles (mean %.2f ms, longest %.2f ms; busy mean %.2f ms)",
               g["uuid"].get<std::string>().c_str(), g["phase"].get<std::string>().c_str(),
               g["fill_phase"].get<std::string>().c_str(), g["bubbles"].get<unsigned long long>(),
               g["mean_bubble_ms"].get<double>(), g["longest_bubble_ms"].get<double>(), g["mean_busy_ms"].get<double>());
    print_line("  %-5s %-8s %-7s %10s %8s %12s %12s %10s %12s", "SLOT", "PID", "GATE", "LAUNCHES", "NCCL",
               "TOKENS(us)", "GRANTED(ms)", "WAITS", "WAITED(ms)");
    for (const auto& s : g["slots"])
      print_line("  %-5d %-8d %-7s %10llu %8llu %12.1f %12.1f %10llu %12.1f", s["slot"].get<int>(), s["pid"].get<int>(),
                 s["gate"].get<std::string>().c_str(), s["launches"].get<unsigned long long>(),
                 s["nccl_launches"].get<unsigned long long>(), static_cast<double>(s["tokens_ns"].get<long long>()) / 1e3,
                 static_cast<double>(s["granted_ns"].get<unsigned long long>()) / 1e6,
                 s["gate_waits"].get<unsigned long long>(), s["gate_wait_ms"].get<double>());
    // Launches let through because no completion marker could cover their process's work.
    for (const auto& s : g["slots"])
      if (s.value("inflight_fail_opens", 0u))
        print_line("  pid %d: %u launches failed open: no completion marker covered its work in flight",
                   s["pid"].get<int>(), s.value("inflight_fail_opens", 0u));
    // Colocations the admission checks refuse, and fillers that wait for a longer bubble.
    if (g.contains("admission_refused") && g["admission_refused"].is_array())
      for (const auto& why : g["admission_refused"])
        if (why.is_string()) print_line("  admission: %s", why.get<std::string>().c_str());
    if (g.contains("slo") && g["slo"].is_object()) {
      const auto& slo = g["slo"];
      print_line("  slo: online inference %s, training duty cycle %.2f (in flight <= %.2f ms), gain estimate %.2f%s",
                 slo["active"].get<bool>() ? "active" : "idle", slo["duty"].get<double>(),
                 slo["inflight_bound_ms"].get<double>(), slo["gain_estimate"].get<double>(),
                 slo["saturated"].get<bool>() ? ", SATURATED: the target cannot be held by holding training back" : "");
      if (slo.contains("request_holds") && (slo["request_holds"].value("stuck", 0ull) || slo["request_holds"].value("refused_ms", 0.0) > 0)) {
        const auto& h = slo["request_holds"];
        print_line("  requests holding training: %llu stuck ignored, %.0f ms refused to keep its floor (%.0f%% of every %.1f s)",
                   h.value("stuck", 0ull), h.value("refused_ms", 0.0), 100 * h.value("floor", 0.0), h.value("window_s", 0.0));
      }
      for (const auto& s : g["slots"])
        if (s["latency_samples"].get<unsigned>() > 0)
          print_line("  pid %d: latency %.2f ms over %u requests this period, target %.2f ms, %u open",
                     s["pid"].get<int>(), s["latency_ms"].get<double>(), s["latency_samples"].get<unsigned>(),
                     s["slo_ms"].get<double>(), s["requests_open"].get<unsigned>());
      if (slo.contains("floor_ms")) {
        print_line("  slo floor %.2f ms (a request %.2f + training in flight %.2f + collective %.2f)%s%s",
                   slo["floor_ms"].get<double>(), slo["floor"]["request_ms"].get<double>(),
                   slo["floor"]["inflight_ms"].get<double>(), slo["floor"]["collective_ms"].get<double>(),
                   slo["spatial"].get<bool>() ? ", training on its MPS SM share" : "",
                   slo["collectives_held"].get<bool>() ? ", collectives held" : "");
        if (slo["below_floor"].get<bool>()) print_line("  BELOW FLOOR: %s", slo["below_floor_why"].get<std::string>().c_str());
      }
    }
  }
  // Processes gone since (exited or killed; a killed one wrote no statistics file): what they
  // launched, as tandemd last read it. Only the most recent are kept (docs/metrics.md).
  if (j.contains("departed") && j["departed"].is_array() && !j["departed"].empty()) {
    std::fputc('\n', stdout);
    print_line("departed (most recent first)");
    print_line("  %-8s %-16s %10s %8s %14s %10s %10s", "PID", "ROLE", "LAUNCHES", "NCCL", "GPU WORK(ms)", "CONNECTED",
               "AGO");
    for (const auto& p : j["departed"])
      print_line("  %-8d %-16s %10llu %8llu %14.1f %10s %10s", p.value("pid", 0),
                 p.value("role", std::string()).c_str(), p.value("launches", 0ull), p.value("nccl_launches", 0ull),
                 p.value("completed_ns", 0.0) / 1e6, seconds_text(p.value("connected_s", 0.0)).c_str(),
                 seconds_text(p.value("departed_s_ago", 0.0)).c_str());
  }
  return 0;
}

}  // namespace tandem::ctl
