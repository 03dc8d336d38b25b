// The exchange with tandemd and the usage text shared by tandemctl's commands.
#include "ctl_common.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "json_text.h"
#include "terminal_text.h"

namespace tandem::ctl {

const char* const kUsage =
    "usage: tandemctl <command> [options]   (every command takes --json: one JSON document on stdout)\n"
    "  status [--json] [--socket PATH]   what the daemon sees: GPUs, bubbles, clients, tokens\n"
    "  top [--interval S] [--json]       live view of GPUs and processes, redrawn every S seconds (1); q quits;\n"
    "                                    --json: one snapshot, rates over one interval\n"
    "  trace --seconds N --out FILE [--json]\n"
    "                                    record N seconds of scheduling as a Chrome/Perfetto trace;\n"
    "                                    --json: what was written (file, events per GPU)\n"
    "  mem [--json]                      each process's device memory: in use, peak, quota, refusals, pooled; the pool\n"
    "  mem --set PID SIZE [--json]       set a process's memory quota (8G, 512M, 25%; none clears)\n"
    "  settings [--markdown | --json]    every TANDEM_* setting with default and description\n"
    "  version [--json]                  the version of tandemctl\n"
    "Times (S, N) are seconds, fractions allowed, or a number with a unit: 500ms, 250us, 1.5s.\n"
    "Errors go to stderr (exit status 1: tandemd absent or refusing; 2: bad arguments), also with --json.\n";

void usage_error(const std::string& why) {
  std::fprintf(stderr, "tandemctl: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

bool try_ask(const std::string& socket_path, MessageType request, const std::string& body, MessageType reply_type,
             int timeout_ms, std::string& reply, std::string& why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) usage_error("socket path too long");
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  // Non-blocking connect: a UNIX connect to a daemon that stopped accepting (stopped, hung, its
  // backlog full) would otherwise block for ever; this way it fails at once with EAGAIN.
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    why = errno == EAGAIN ? "tandemd on " + socket_path + " is not accepting connections (its backlog is full)"
                          : "no tandemd answers on " + socket_path + " (" + std::strerror(errno) + ")";
    if (fd >= 0) close(fd);
    return false;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // the exchange itself waits with timeouts
  MessageHeader h{};
  std::string payload;
  bool answered = send_message(fd, request, body) &&
                  recv_message(fd, h, payload, timeout_ms, kMaxReplyPayload) == RecvStatus::ok;
  close(fd);
  if (answered && h.type == static_cast<uint32_t>(MessageType::error)) {
    msg::Error e;
    msg::Refusal invalid;
    why = "tandemd refused: " + (msg::decode(payload, e, invalid) && !e.message.empty() ? e.message : payload);
    return false;
  }
  if (!answered || h.type != static_cast<uint32_t>(reply_type)) {
    why = "tandemd on " + socket_path + " did not answer";
    return false;
  }
  reply = std::move(payload);
  return true;
}

std::string ask(const std::string& socket_path, MessageType request, const std::string& body, MessageType reply_type) {
  std::string reply, why;
  if (!try_ask(socket_path, request, body, reply_type, 5000, reply, why)) {
    std::fprintf(stderr, "tandemctl: %s\n", terminal_text(why).c_str());  // may quote the daemon's words
    std::exit(1);
  }
  return reply;
}

nlohmann::json ask_status(const std::string& socket_path) {
  std::string payload =
      ask(socket_path, MessageType::status_request, msg::encode(msg::StatusRequest{}), MessageType::status_reply);
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "tandemctl: malformed status reply\n");
    std::exit(1);
  }
  return j;
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

void print_json(const nlohmann::json& j) { std::printf("%s\n", json_text(j).c_str()); }

std::string mib(unsigned long long bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / 1048576.0);
  return text;
}

}  // namespace tandem::ctl
