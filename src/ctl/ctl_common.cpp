// The exchange with tandemd and the usage text shared by tandemctl's commands.
#include "ctl_common.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tandem::ctl {

const char* const kUsage =
    "usage: tandemctl <command> [options]   (every command takes --json: one JSON document on stdout)\n"
    "  status [--json] [--socket PATH]   what the daemon sees: GPUs, bubbles, clients, tokens\n"
    "  trace --seconds N --out FILE [--json]\n"
    "                                    record N seconds of scheduling as a Chrome/Perfetto trace;\n"
    "                                    --json: what was written (file, events per GPU)\n"
    "  mem [--json]                      each process's device memory: in use, peak, quota, refusals, pooled; the pool\n"
    "  mem --set PID SIZE [--json]       set a process's memory quota (8G, 512M, 25%; none clears)\n"
    "  settings [--markdown | --json]    every TANDEM_* setting with default and description\n"
    "  version [--json]                  the version of tandemctl\n"
    "Errors go to stderr (exit status 1: tandemd absent or refusing; 2: bad arguments), also with --json.\n";

void usage_error(const std::string& why) {
  std::fprintf(stderr, "tandemctl: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

std::string ask(const std::string& socket_path, MessageType request, const std::string& body, MessageType reply_type) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) usage_error("socket path too long");
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "tandemctl: no tandemd answers on %s (%s)\n", socket_path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  MessageHeader h{};
  std::string payload;
  if (!send_message(fd, request, body) || recv_message(fd, h, payload, 5000, kMaxReplyPayload) != RecvStatus::ok) {
    std::fprintf(stderr, "tandemctl: tandemd on %s did not answer\n", socket_path.c_str());
    std::exit(1);
  }
  if (h.type == static_cast<uint32_t>(MessageType::error)) {
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

nlohmann::json ask_status(const std::string& socket_path) {
  std::string payload = ask(socket_path, MessageType::status_request, "{}", MessageType::status_reply);
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "tandemctl: malformed status reply\n");
    std::exit(1);
  }
  return j;
}

void print_json(const nlohmann::json& j) { std::printf("%s\n", j.dump().c_str()); }

std::string mib(unsigned long long bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / 1048576.0);
  return text;
}

}  // namespace tandem::ctl
