// tandemctl: shows what tandem is doing. Usage in `tandemctl --help`; one file per command family.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ctl_common.h"
#include "settings.h"

extern char** environ;

int main(int argc, char** argv) {
  using namespace tandem::ctl;
  tandem::load_settings(environ, [](const char* m) noexcept { std::fprintf(stderr, "tandemctl: %s\n", m); });
  if (argc < 2) usage_error("missing command");
  std::string command = argv[1];
  bool json = false, markdown = false;
  double seconds = 0, interval_s = 1.0;
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
    else if (a == "--interval" && i + 1 < argc) {
      char* end = nullptr;
      interval_s = std::strtod(argv[++i], &end);
      if (*end || !(interval_s >= 0.1 && interval_s <= 3600)) usage_error("--interval takes seconds from 0.1 to 3600");
    }
    else if (a == "--set" && i + 2 < argc) {
      set = true;
      set_pid = argv[++i];
      set_size = argv[++i];
    }
    else usage_error("unknown argument " + a);
  }
  if (json && markdown) usage_error("--json and --markdown exclude each other");
  if (command == "status") return status_command(socket_path, json);
  if (command == "settings") return settings_command(markdown, json);
  if (command == "top") {
    if (markdown) usage_error("top has no --markdown");
    return top_command(socket_path, interval_s, json);
  }
  if (command == "trace") return trace_command(socket_path, seconds, out, json);
  if (command == "mem")
    return set ? mem_set_command(socket_path, set_pid, set_size, json) : mem_show_command(socket_path, json);
  if (command == "version") {
    if (json) print_json({{"version", TANDEM_VERSION_STRING}});
    else std::printf("tandemctl %s\n", TANDEM_VERSION_STRING);
    return 0;
  }
  if (command == "--help" || command == "-h" || command == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  usage_error("unknown command " + command);
}
