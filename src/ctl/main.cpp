// tandemctl: shows what tandem is doing. Usage in `tandemctl --help`; one file per command family.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ctl_common.h"
#include "duration.h"
#include "settings.h"

extern char** environ;

namespace {

// A time flag's value: seconds, fractions allowed, or a number with a unit (500ms, 1.5s).
uint64_t duration_flag(const std::string& flag, const char* text, const char* accepted) {
  tandem::DurationSpec spec;
  if (!tandem::parse_duration_range(accepted, tandem::kNsPerS, spec)) tandem::ctl::usage_error("bad range for " + flag);
  tandem::DurationResult d = tandem::parse_duration(text, spec);
  if (!d.ok())
    tandem::ctl::usage_error(flag + " '" + text + "' is not valid (" + tandem::duration_error_text(d.error) +
                             "; accepted: " + accepted + ", seconds or a number with a unit: ns, us, ms, s)");
  return d.ns;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem::ctl;
  tandem::load_settings(environ, [](const char* m) noexcept { std::fprintf(stderr, "tandemctl: %s\n", m); });
  if (argc < 2) usage_error("missing command");
  std::string command = argv[1];
  bool json = false, markdown = false;
  uint64_t trace_ns = 0;
  double interval_s = 1.0;
  std::string out;
  std::string set_pid, set_size;
  bool set = false;
  std::string socket_path = tandem::setting_text(tandem::SettingId::TANDEM_SOCKET);
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--markdown") markdown = true;
    else if (a == "--socket" && i + 1 < argc) socket_path = argv[++i];
    else if (a == "--seconds" && i + 1 < argc) trace_ns = duration_flag(a, argv[++i], "1ms to 3600s");
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--interval" && i + 1 < argc)
      interval_s = static_cast<double>(duration_flag(a, argv[++i], "100ms to 3600s")) / 1e9;
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
  if (command == "trace") return trace_command(socket_path, trace_ns, out, json);
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
