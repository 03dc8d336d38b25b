// tandemctl: shows what tandem is doing. Usage in `tandemctl --help`.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "protocol.h"
#include "settings.h"

extern char** environ;

namespace {

const char* kUsage =
    "usage: tandemctl <command> [options]\n"
    "  status [--json] [--socket PATH]   what the daemon sees: clients and roles\n"
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

int status(const std::string& socket_path, bool json) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) usage_error("socket path too long");
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "tandemctl: no tandemd answers on %s (%s)\n", socket_path.c_str(), std::strerror(errno));
    return 1;
  }
  tandem::MessageHeader h{};
  std::string payload;
  if (!tandem::send_message(fd, tandem::MessageType::status_request, "{}") ||
      tandem::recv_message(fd, h, payload, 2000) != tandem::RecvStatus::ok ||
      h.type != static_cast<uint32_t>(tandem::MessageType::status_reply)) {
    std::fprintf(stderr, "tandemctl: tandemd on %s did not answer the status request\n", socket_path.c_str());
    return 1;
  }
  close(fd);
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
  std::printf("%-8s %-6s %-16s %s\n", "PID", "UID", "ROLE", "CONNECTED");
  for (const auto& c : j["clients"])
    std::printf("%-8d %-6d %-16s %.1f s\n", c["pid"].get<int>(), c["uid"].get<int>(),
                c["role"].get<std::string>().c_str(), c["connected_s"].get<double>());
  if (j["clients"].empty()) std::printf("(no clients)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::load_settings(environ, [](const char* m) noexcept { std::fprintf(stderr, "tandemctl: %s\n", m); });
  if (argc < 2) usage_error("missing command");
  std::string command = argv[1];
  bool json = false, markdown = false;
  std::string socket_path = tandem::setting_text(tandem::SettingId::TANDEM_SOCKET);
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--markdown") markdown = true;
    else if (a == "--socket" && i + 1 < argc) socket_path = argv[++i];
    else usage_error("unknown argument " + a);
  }
  if (command == "status") return status(socket_path, json);
  if (command == "settings") return settings(markdown);
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
