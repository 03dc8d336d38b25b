// tandemctl mem: each process's device memory and the pool; mem --set: a process's quota
// (docs/memory.md).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ctl_common.h"
#include "settings.h"
#include "terminal_text.h"

namespace tandem::ctl {

int mem_show_command(const std::string& socket_path, bool json) {
  nlohmann::json j = ask_status(socket_path);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& g : j["gpus"])
    for (const auto& s : g["slots"])
      rows.push_back({{"gpu", g["uuid"]}, {"pid", s["pid"]}, {"bytes_in_use", s["bytes_in_use"]},
                      {"peak_bytes", s["peak_bytes"]}, {"quota_bytes", s["quota_bytes"]},
                      {"quota_source", s["assigned_quota_bytes"].get<unsigned long long>() ? "tandemd"
                                       : s["quota_bytes"].get<unsigned long long>() ? "TANDEM_MEM_LIMIT" : "none"},
                      {"quota_refusals", s["quota_refusals"]}, {"pool_bytes", s.value("pool_bytes", 0ull)}});
  nlohmann::json pools = nlohmann::json::array();
  for (const auto& g : j["gpus"])
    if (g.contains("pool") && g["pool"]["chunks"].get<unsigned long long>()) {
      nlohmann::json p = g["pool"];
      p["gpu"] = g["uuid"];
      pools.push_back(p);
    }
  if (json) {
    print_json({{"processes", rows}, {"pools", pools}});
    return 0;
  }
  print_line("%-10s %-8s %12s %12s %12s %-17s %8s %12s", "GPU", "PID", "IN USE(MiB)", "PEAK(MiB)", "QUOTA(MiB)",
             "QUOTA FROM", "REFUSED", "POOLED(MiB)");
  for (const auto& r : rows) {
    unsigned long long quota = r["quota_bytes"].get<unsigned long long>();
    print_line("%-10s %-8d %12s %12s %12s %-17s %8llu %12s", r["gpu"].get<std::string>().substr(0, 8).c_str(),
               r["pid"].get<int>(), mib(r["bytes_in_use"].get<unsigned long long>()).c_str(),
               mib(r["peak_bytes"].get<unsigned long long>()).c_str(), quota ? mib(quota).c_str() : "-",
               r["quota_source"].get<std::string>().c_str(), r["quota_refusals"].get<unsigned long long>(),
               mib(r["pool_bytes"].get<unsigned long long>()).c_str());
  }
  if (rows.empty()) print_line("(no registered processes)");
  for (const auto& p : pools) {
    print_line("pool on GPU %s: %s MiB in %llu chunks, %s MiB free, %s MiB of exited processes; %llu handovers "
               "(last %.1f ms, max %.1f ms), %llu short answers",
               p["gpu"].get<std::string>().substr(0, 8).c_str(), mib(p["bytes"].get<unsigned long long>()).c_str(),
               p["chunks"].get<unsigned long long>(), mib(p["free_bytes"].get<unsigned long long>()).c_str(),
               mib(p["orphaned_bytes"].get<unsigned long long>()).c_str(), p["handovers"].get<unsigned long long>(),
               p["handover_last_ms"].get<double>(), p["handover_max_ms"].get<double>(),
               p["short_answers"].get<unsigned long long>());
    // Who was short and why (the holder that kept the memory), without reading tandemd's log.
    std::string last = p.value("last_short_answer", "");
    if (!last.empty()) print_line("  last short answer: %s", last.c_str());
  }
  return 0;
}

int mem_set_command(const std::string& socket_path, const std::string& pid_text, std::string size, bool json) {
  char* end = nullptr;
  long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (pid_text.empty() || *end || pid <= 0) usage_error("mem --set needs a process id, got '" + pid_text + "'");
  if (size == "none") size.clear();
  MemorySize parsed;
  if (!parse_memory_size(size.c_str(), parsed))
    usage_error("size '" + size + "': give bytes with a K/M/G/T suffix (8G, 512M), N% of the GPU, or none");
  std::string reply = ask(socket_path, MessageType::quota_request, msg::encode(msg::QuotaRequest{pid, size, {}}),
                          MessageType::quota_reply);
  msg::QuotaReply answer;
  msg::Refusal invalid;
  if (!msg::decode(reply, answer, invalid)) {
    std::fprintf(stderr, "tandemctl: malformed quota reply (%s)\n", invalid.message.c_str());
    return 1;
  }
  unsigned long long bytes = answer.bytes;
  if (json) {  // the status document's name for it; 0: cleared (TANDEM_MEM_LIMIT applies, if set)
    print_json({{"pid", pid}, {"gpu", answer.gpu}, {"assigned_quota_bytes", bytes}});
    return 0;
  }
  if (bytes)
    print_line("tandemctl: pid %ld may hold %s MiB of device memory from its next allocation", pid, mib(bytes).c_str());
  else
    print_line("tandemctl: pid %ld has no quota from tandemd (TANDEM_MEM_LIMIT applies, if set)", pid);
  return 0;
}

}  // namespace tandem::ctl
