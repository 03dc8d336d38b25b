// tandemctl: shows what tandem is doing. Usage in `tandemctl --help`.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include "protocol.h"
#include "settings.h"

extern char** environ;

namespace {

const char* kUsage =
    "usage: tandemctl <command> [options]\n"
    "  status [--json] [--socket PATH]   what the daemon sees: GPUs, bubbles, clients, tokens\n"
    "  trace --seconds N --out FILE      record N seconds of scheduling as a Chrome/Perfetto trace\n"
    "  mem [--json]                      each process's device memory: in use, peak, quota, refusals, pooled; the pool\n"
    "  mem --set PID SIZE                set a process's memory quota (8G, 512M, 25%; none clears)\n"
    "  settings [--markdown]             every TANDEM_* setting with default and description\n"
    "  version                           the version of tandemctl\n";

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "tandemctl: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

// Escapes '|' for a markdown table cell.
std::string cell(const char* text) {
  std::string out;
  for (const char* p = text; *p; ++p) {
    if (*p == '|') out += '\\';
    out += *p;
  }
  return out;
}

int settings(bool markdown) {
  size_t n = 0;
  const tandem::SettingInfo* table = tandem::setting_table(&n);
  if (markdown) {
    std::printf("| Variable | Default | Accepted | Description |\n|---|---|---|---|\n");
    for (size_t i = 0; i < n; ++i)
      std::printf("| `%s` | %s | `%s` | %s |\n", table[i].name,
                  table[i].default_value[0] ? ("`" + cell(table[i].default_value) + "`").c_str() : "(empty)",
                  cell(table[i].accepted).c_str(), table[i].description);
  } else {
    for (size_t i = 0; i < n; ++i)
      std::printf("%-22s default %-28s %s\n  accepted: %s\n", table[i].name,
                  table[i].default_value[0] ? table[i].default_value : "(empty)", table[i].description,
                  table[i].accepted);
  }
  return 0;
}

// One request, one reply; exits with a message when no daemon answers.
std::string ask(const std::string& socket_path, tandem::MessageType request, const std::string& body,
                tandem::MessageType reply_type) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) usage_error("socket path too long");
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "tandemctl: no tandemd answers on %s (%s)\n", socket_path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  tandem::MessageHeader h{};
  std::string payload;
  if (!tandem::send_message(fd, request, body) ||
      tandem::recv_message(fd, h, payload, 5000, tandem::kMaxReplyPayload) != tandem::RecvStatus::ok) {
    std::fprintf(stderr, "tandemctl: tandemd on %s did not answer\n", socket_path.c_str());
    std::exit(1);
  }
  if (h.type == static_cast<uint32_t>(tandem::MessageType::error)) {
    nlohmann::json e = nlohmann::json::parse(payload, nullptr, false);
    std::string message = e.is_object() ? e.value("message", payload) : payload;
    std::fprintf(stderr, "tandemctl: tandemd refused: %s\n", message.c_str());
    std::exit(1);
  }
  if (h.type != static_cast<uint32_t>(reply_type)) {
    std::fprintf(stderr, "tandemctl: tandemd on %s did not answer\n", socket_path.c_str());
    std::exit(1);
  }
  close(fd);
  return payload;
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int trace(const std::string& socket_path, double seconds, const std::string& out) {
  if (seconds <= 0 || out.empty()) usage_error("trace needs --seconds N (> 0) and --out FILE");
  // The daemon's clock is this machine's CLOCK_MONOTONIC: mark now, wait, fetch what came since.
  ask(socket_path, tandem::MessageType::status_request, "{}", tandem::MessageType::status_reply);
  uint64_t since = monotonic_ns();
  timespec wait{static_cast<time_t>(seconds), static_cast<long>((seconds - static_cast<double>(static_cast<time_t>(seconds))) * 1e9)};
  nanosleep(&wait, nullptr);
  std::string reply = ask(socket_path, tandem::MessageType::trace_request,
                          nlohmann::json{{"since_ns", since}}.dump(), tandem::MessageType::trace_reply);
  nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "tandemctl: malformed trace reply\n");
    return 1;
  }
  nlohmann::json events = nlohmann::json::array();
  for (auto& [uuid, t] : j["gpus"].items())
    for (auto& e : t["traceEvents"]) events.push_back(e);
  FILE* f = std::fopen(out.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "tandemctl: cannot write %s: %s\n", out.c_str(), std::strerror(errno));
    return 1;
  }
  std::string text = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  std::printf("tandemctl: %zu events in %s (open it in ui.perfetto.dev)\n", events.size(), out.c_str());
  return 0;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

// "docker 4f1c2a9d6e0b" (runtime and short id; the pod when Kubernetes names one), else the
// cgroup path, as tandemd read it from /proc/<pid>/cgroup.
std::string container_text(const nlohmann::json& client) {
  if (!client.contains("container") || !client["container"].is_object()) return "-";
  const auto& k = client["container"];
  std::string runtime = k.value("runtime", std::string()), id = k.value("id", std::string());
  std::string pod = k.value("pod", std::string()), cgroup = k.value("cgroup", std::string());
  if (runtime.empty()) return cgroup.empty() ? "-" : "cgroup " + cgroup;
  return runtime + " " + id.substr(0, 12) + (pod.empty() ? "" : " pod " + pod);
}

int status(const std::string& socket_path, bool json) {
  std::string payload = ask(socket_path, tandem::MessageType::status_request, "{}", tandem::MessageType::status_reply);
  if (json) {
    std::printf("%s\n", payload.c_str());
    return 0;
  }
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "tandemctl: malformed status reply\n");
    return 1;
  }
  const auto& d = j["daemon"];
  std::printf("tandemd %s  pid %d  policy %s  socket %s  up %.1f s\n", d["version"].get<std::string>().c_str(),
              d["pid"].get<int>(), d["policy"].get<std::string>().c_str(), d["socket"].get<std::string>().c_str(),
              d["uptime_s"].get<double>());
  if (d.contains("holds") && d["holds"].is_object()) {  // what clients made it hold (docs/scheduler.md)
    const auto& h = d["holds"];
    std::printf("holds %llu connections, %llu GPU states, %llu pool chunks, %llu passed fds, %llu processes' "
                "orphaned chunks, %.1f KiB of unread replies\n",
                h.value("clients", 0ull), h.value("gpus", 0ull), h.value("pool_chunks", 0ull),
                h.value("passed_fds", 0ull), h.value("orphan_processes", 0ull), h.value("reply_bytes", 0.0) / 1024);
  }
  std::printf("%-8s %-6s %-6s %-16s %-10s %-12s %s\n", "PID", "UID", "GID", "ROLE", "CONNECTED", "TRUST", "CONTAINER");
  for (const auto& c : j["clients"])
    std::printf("%-8d %-6d %-6d %-16s %-10s %-12s %s\n", c["pid"].get<int>(), c["uid"].get<int>(), c.value("gid", -1),
                c["role"].get<std::string>().c_str(), (seconds_text(c["connected_s"].get<double>())).c_str(),
                c.value("trust_domain", std::string("-")).c_str(), container_text(c).c_str());
  if (j["clients"].empty()) std::printf("(no clients)\n");
  for (const auto& g : j["gpus"]) {
    std::printf("\nGPU %s: %s, fill %s, %llu bubbles (mean %.2f ms, longest %.2f ms; busy mean %.2f ms)\n",
                g["uuid"].get<std::string>().c_str(), g["phase"].get<std::string>().c_str(),
                g["fill_phase"].get<std::string>().c_str(), g["bubbles"].get<unsigned long long>(),
                g["mean_bubble_ms"].get<double>(), g["longest_bubble_ms"].get<double>(), g["mean_busy_ms"].get<double>());
    std::printf("  %-5s %-8s %-7s %10s %8s %12s %12s %10s %12s\n", "SLOT", "PID", "GATE", "LAUNCHES", "NCCL",
                "TOKENS(us)", "GRANTED(ms)", "WAITS", "WAITED(ms)");
    for (const auto& s : g["slots"])
      std::printf("  %-5d %-8d %-7s %10llu %8llu %12.1f %12.1f %10llu %12.1f\n", s["slot"].get<int>(), s["pid"].get<int>(),
                  s["gate"].get<std::string>().c_str(), s["launches"].get<unsigned long long>(),
                  s["nccl_launches"].get<unsigned long long>(), static_cast<double>(s["tokens_ns"].get<long long>()) / 1e3,
                  static_cast<double>(s["granted_ns"].get<unsigned long long>()) / 1e6,
                  s["gate_waits"].get<unsigned long long>(), s["gate_wait_ms"].get<double>());
    if (g.contains("slo") && g["slo"].is_object()) {
      const auto& slo = g["slo"];
      std::printf("  slo: online inference %s, training duty cycle %.2f (in flight <= %.2f ms), gain estimate %.2f%s\n",
                  slo["active"].get<bool>() ? "active" : "idle", slo["duty"].get<double>(),
                  slo["inflight_bound_ms"].get<double>(), slo["gain_estimate"].get<double>(),
                  slo["saturated"].get<bool>() ? ", SATURATED: the target cannot be held by holding training back" : "");
      for (const auto& s : g["slots"])
        if (s["latency_samples"].get<unsigned>() > 0)
          std::printf("  pid %d: latency %.2f ms over %u requests this period, target %.2f ms, %u open\n",
                      s["pid"].get<int>(), s["latency_ms"].get<double>(), s["latency_samples"].get<unsigned>(),
                      s["slo_ms"].get<double>(), s["requests_open"].get<unsigned>());
    }
  }
  return 0;
}

std::string mib(unsigned long long bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / 1048576.0);
  return text;
}

int mem_show(const std::string& socket_path, bool json) {
  std::string payload = ask(socket_path, tandem::MessageType::status_request, "{}", tandem::MessageType::status_reply);
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "tandemctl: malformed status reply\n");
    return 1;
  }
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
    std::printf("%s\n", nlohmann::json{{"processes", rows}, {"pools", pools}}.dump().c_str());
    return 0;
  }
  std::printf("%-10s %-8s %12s %12s %12s %-17s %8s %12s\n", "GPU", "PID", "IN USE(MiB)", "PEAK(MiB)", "QUOTA(MiB)",
              "QUOTA FROM", "REFUSED", "POOLED(MiB)");
  for (const auto& r : rows) {
    unsigned long long quota = r["quota_bytes"].get<unsigned long long>();
    std::printf("%-10s %-8d %12s %12s %12s %-17s %8llu %12s\n", r["gpu"].get<std::string>().substr(0, 8).c_str(),
                r["pid"].get<int>(), mib(r["bytes_in_use"].get<unsigned long long>()).c_str(),
                mib(r["peak_bytes"].get<unsigned long long>()).c_str(), quota ? mib(quota).c_str() : "-",
                r["quota_source"].get<std::string>().c_str(), r["quota_refusals"].get<unsigned long long>(),
                mib(r["pool_bytes"].get<unsigned long long>()).c_str());
  }
  if (rows.empty()) std::printf("(no registered processes)\n");
  for (const auto& p : pools)
    std::printf("pool on GPU %s: %s MiB in %llu chunks, %s MiB free, %s MiB of exited processes; %llu handovers "
                "(last %.1f ms, max %.1f ms), %llu short answers\n",
                p["gpu"].get<std::string>().substr(0, 8).c_str(), mib(p["bytes"].get<unsigned long long>()).c_str(),
                p["chunks"].get<unsigned long long>(), mib(p["free_bytes"].get<unsigned long long>()).c_str(),
                mib(p["orphaned_bytes"].get<unsigned long long>()).c_str(), p["handovers"].get<unsigned long long>(),
                p["handover_last_ms"].get<double>(), p["handover_max_ms"].get<double>(),
                p["short_answers"].get<unsigned long long>());
  return 0;
}

int mem_set(const std::string& socket_path, const std::string& pid_text, std::string size) {
  char* end = nullptr;
  long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (pid_text.empty() || *end || pid <= 0) usage_error("mem --set needs a process id, got '" + pid_text + "'");
  if (size == "none") size.clear();
  tandem::MemorySize parsed;
  if (!tandem::parse_memory_size(size.c_str(), parsed))
    usage_error("size '" + size + "': give bytes with a K/M/G/T suffix (8G, 512M), N% of the GPU, or none");
  std::string reply = ask(socket_path, tandem::MessageType::quota_request, nlohmann::json{{"pid", pid}, {"size", size}}.dump(),
                          tandem::MessageType::quota_reply);
  nlohmann::json j = nlohmann::json::parse(reply, nullptr, false);
  unsigned long long bytes = j.is_object() ? j.value("bytes", 0ull) : 0ull;
  if (bytes)
    std::printf("tandemctl: pid %ld may hold %s MiB of device memory from its next allocation\n", pid, mib(bytes).c_str());
  else
    std::printf("tandemctl: pid %ld has no quota from tandemd (TANDEM_MEM_LIMIT applies, if set)\n", pid);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::load_settings(environ, [](const char* m) noexcept { std::fprintf(stderr, "tandemctl: %s\n", m); });
  if (argc < 2) usage_error("missing command");
  std::string command = argv[1];
  bool json = false, markdown = false;
  double seconds = 0;
  std::string out;
  std::string set_pid, set_size;
  bool set = false;
  std::string socket_path = tandem::setting_text(tandem::SettingId::TANDEM_SOCKET);
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--markdown") markdown = true;
    else if (a == "--socket" && i + 1 < argc) socket_path = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--set" && i + 2 < argc) {
      set = true;
      set_pid = argv[++i];
      set_size = argv[++i];
    }
    else usage_error("unknown argument " + a);
  }
  if (command == "status") return status(socket_path, json);
  if (command == "settings") return settings(markdown);
  if (command == "trace") return trace(socket_path, seconds, out);
  if (command == "mem") return set ? mem_set(socket_path, set_pid, set_size) : mem_show(socket_path, json);
  if (command == "version") {
    std::printf("tandemctl %s\n", TANDEM_VERSION_STRING);
    return 0;
  }
  if (command == "--help" || command == "-h" || command == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  usage_error("unknown command " + command);
}
