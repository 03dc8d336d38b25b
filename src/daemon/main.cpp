// tandemd: the node daemon. Usage in `tandemd --help`.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "crash_handler.h"
#include "daemon_config.h"
#include "log.h"
#include "server.h"
#include "settings.h"

extern char** environ;

namespace {

const char* kUsage =
    "usage: tandemd [--socket PATH] [--policy fill|slo] [--foreground] [--config FILE] [--log LEVEL]\n"
    "               [--socket-owner USER] [--socket-group GROUP] [--socket-mode MODE] [--metrics HOST:PORT]\n"
    "               [--admin-socket PATH] [--grant-dir DIR]\n"
    "  --socket PATH         UNIX socket (default: TANDEM_SOCKET, else /run/tandem/tandemd.sock)\n"
    "  --policy NAME         scheduling policy: fill (default): training protected, fillers use its\n"
    "                        bubbles; slo: online inference held at its latency target (TANDEM_SLO_MS),\n"
    "                        training gets the rest\n"
    "  --foreground          stay in the foreground (default: daemonize)\n"
    "  --config FILE         JSON object: socket, policy, foreground, log, socket_owner, socket_group,\n"
    "                        socket_mode, metrics, admin_socket, grant_dir, roles, max_slots_per_user,\n"
    "                        max_slots, quota_admins,\n"
    "                        trust_domains (docs/security.md), slots (docs/kubernetes.md);\n"
    "                        arguments after it override it\n"
    "  --log LEVEL           error | warn | info | debug (default: TANDEM_LOG, else info)\n"
    "  --socket-owner USER   owner of the socket (default: tandemd's user)\n"
    "  --socket-group GROUP  group of the socket (default: tandemd's group); its members may\n"
    "                        register as training and inference unless the config says otherwise\n"
    "  --socket-mode MODE    octal permissions of the socket (default 0660)\n"
    "  --metrics HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md);\n"
    "                        :PORT listens on every interface, port 0 lets the kernel choose\n"
    "  --admin-socket PATH   a second socket (mode 0600) whose clients may create grants: the device\n"
    "                        plugin's (docs/security.md); default none\n"
    "  --grant-dir DIR       where grants' sockets are made (default: grants/ beside the socket)\n"
    "  --crash-for-test HOW  a test aid: once the socket is bound, crash (segv, abort, or overflow:\n"
    "                        the stack) to show the backtrace a fatal signal writes (docs/scheduler.md)\n";

tandem::scheduler::Server* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "tandemd: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

// Pool chunks are descriptors the daemon keeps (up to the caps in daemon_limits.h): use the
// whole hard limit, not the soft 1024 a shell starts with. At the limit the daemon sheds new
// connections rather than failing worse.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

bool valid_policy(const std::string& p) { return p == "fill" || p == "slo"; }

int level_of(const std::string& name) {
  const char* names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i)
    if (name == names[i]) return i;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::scheduler::install_crash_handler();
  tandem::load_settings(environ, [](const char* m) noexcept { std::fprintf(stderr, "tandemd: %s\n", m); });
  using tandem::SettingId;
  tandem::scheduler::DaemonConfig config;
  tandem::scheduler::ServerOptions& options = config.server;
  options.socket_path = tandem::setting_text(SettingId::TANDEM_SOCKET);
  // Time settings arrive in nanoseconds, range-checked (settings_table.def): no scaling here.
  auto ns = [](SettingId id) { return tandem::setting_ns(id); };
  tandem::scheduler::SchedulerParams& sp = options.scheduler;
  sp.period_ns = ns(SettingId::TANDEM_SAMPLE_US);
  sp.quiet_samples = static_cast<int>(tandem::setting_int(SettingId::TANDEM_BUBBLE_SAMPLES));
  sp.fill.period_ns = sp.period_ns;
  sp.fill.conservative_ns = ns(SettingId::TANDEM_FILL_CONSERVATIVE_US);
  sp.fill.stable_after_ns = ns(SettingId::TANDEM_FILL_STABLE_US);
  sp.fill.max_inflight_ns = ns(SettingId::TANDEM_MAX_INFLIGHT_US);
  sp.fill.fill_during_comm = setting_bool(SettingId::TANDEM_FILL_COMM);
  sp.fill.online_hold = static_cast<double>(tandem::setting_int(SettingId::TANDEM_FILL_ONLINE_HOLD)) / 100;
  sp.slo.predict = setting_bool(SettingId::TANDEM_SLO_PREDICT);
  sp.slo.period_ns = sp.period_ns;
  sp.slo.control_period_ns = ns(SettingId::TANDEM_SLO_PERIOD_MS);
  if (sp.slo.control_period_ns < 10 * sp.period_ns) sp.slo.control_period_ns = 10 * sp.period_ns;
  sp.slo.window_ns = ns(SettingId::TANDEM_SLO_WINDOW_US);
  sp.slo.idle_ns = ns(SettingId::TANDEM_SLO_IDLE_MS);
  std::string partition = tandem::setting_text(SettingId::TANDEM_SLO_PARTITION);
  sp.slo.live_partition = partition == "auto" ? -1 : partition == "off" ? 0 : std::atoi(partition.c_str());
  sp.zico = setting_bool(SettingId::TANDEM_ZICO);
  sp.zico_profile_ns = ns(SettingId::TANDEM_ZICO_PROFILE_MS);
  tandem::MemorySize zico_budget;
  if (tandem::parse_memory_size(tandem::setting_text(SettingId::TANDEM_ZICO_BUDGET), zico_budget) && !zico_budget.empty) {
    sp.zico_budget_bytes = zico_budget.is_percent ? 0 : zico_budget.bytes;
    sp.zico_budget_percent = zico_budget.is_percent ? zico_budget.percent : 100;
  }
  bool& foreground = config.foreground;
  std::string& log = config.log;
  std::string crash_signal;  // --crash-for-test
  log = tandem::setting_was_set(tandem::SettingId::TANDEM_LOG) ? tandem::setting_text(tandem::SettingId::TANDEM_LOG)
                                                                : "info";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail("missing value for " + a);
      return argv[++i];
    };
    if (a == "--socket") options.socket_path = value();
    else if (a == "--policy") options.policy = value();
    else if (a == "--foreground") foreground = true;
    else if (a == "--log") log = value();
    else if (a == "--metrics") options.metrics_address = value();
    else if (a == "--admin-socket") options.admin_socket = value();
    else if (a == "--grant-dir") options.grant_dir = value();
    else if (a == "--config") {
      std::string path = value();
      std::ifstream f(path);
      if (!f) fail("cannot read config file " + path);
      std::stringstream text;
      text << f.rdbuf();
      std::string error;
      if (!tandem::scheduler::apply_config(text.str(), config, error)) fail("config " + path + ": " + error);
    } else if (a == "--socket-owner") {
      std::string why;
      if (!tandem::scheduler::resolve_user(value(), options.socket_owner, &why)) fail("--socket-owner: " + why);
    } else if (a == "--socket-group") {
      std::string why;
      if (!tandem::scheduler::resolve_group(value(), options.socket_group, &why)) fail("--socket-group: " + why);
    } else if (a == "--socket-mode") {
      std::string mode = value();
      if (!tandem::scheduler::parse_socket_mode(mode, options.socket_mode)) fail("--socket-mode: an octal mode from 0 to 0777, like 0660");
    } else if (a == "--crash-for-test") {
      crash_signal = value();
      if (crash_signal != "segv" && crash_signal != "abort" && crash_signal != "overflow")
        fail("--crash-for-test: segv, abort or overflow");
    } else if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else fail("unknown argument " + a);
  }
  if (!valid_policy(options.policy)) fail("unknown policy '" + options.policy + "' (accepted: fill, slo)");
  sp.policy = options.policy == "slo" ? TANDEM_POLICY_SLO : TANDEM_POLICY_FILL;
  if (level_of(log) < 0) fail("unknown log level '" + log + "'");
  tandem::set_log_level(static_cast<tandem::LogLevel>(level_of(log)));

  raise_fd_limit();
  tandem::scheduler::Server server(options);
  std::string error;
  if (!server.open(error)) {
    std::fprintf(stderr, "tandemd: %s\n", error.c_str());
    return 1;
  }
  if (!foreground && daemon(1, 0) != 0) {
    std::fprintf(stderr, "tandemd: cannot daemonize: %s\n", std::strerror(errno));
    return 1;
  }
  g_server = &server;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (!crash_signal.empty()) tandem::scheduler::crash_for_test(crash_signal.c_str());
  server.run();
  TANDEM_LOG_INFO("tandemd stopping");
  return 0;  // ~Server removes the socket
}
