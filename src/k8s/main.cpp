// tandem-device-plugin: tandemd's measured room offered to Kubernetes (docs/kubernetes.md).
// One loop: every poll it asks tandemd for its status (bounded: a non-blocking connect, a reply
// within a deadline) and the kubelet which slots pods hold, and updates the slot lists that
// the gRPC handlers stream; a few times a second it checks that its sockets are served and
// registered with the kubelet. Usage in `tandem-device-plugin --help`.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <grpc/support/log.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "ctl_common.h"
#include "kubelet_link.h"
#include "log.h"
#include "settings.h"

extern char** environ;

#ifndef TANDEM_VERSION_STRING
#define TANDEM_VERSION_STRING "0.0.0"
#endif

namespace {

using namespace tandem::k8s;

const char* kUsage =
    "usage: tandem-device-plugin [--socket TANDEMD_SOCKET] [--kubelet-dir DIR] [--pod-resources SOCKET]\n"
    "                            [--library-dir DIR] [--device-list-strategy envvar|cdi] [--poll-ms MS]\n"
    "                            [--admin-socket PATH] [--log LEVEL]\n"
    "  --socket PATH          tandemd's socket (default: TANDEM_SOCKET, else /run/tandem/tandemd.sock); a\n"
    "                         container given slots mounts its grant's directory, DIR/grants/<name>\n"
    "                         beside it, at /run/tandem (never tandemd's own socket)\n"
    "  --admin-socket PATH    tandemd's admin socket, where grants are asked for (default: --socket,\n"
    "                         which allows it to root in tandemd's namespaces only)\n"
    "  --kubelet-dir DIR      the kubelet's device-plugin directory, holding kubelet.sock; the plugin's\n"
    "                         sockets go there (default /var/lib/kubelet/device-plugins)\n"
    "  --pod-resources PATH   the kubelet's pod-resources socket, which says which slots pods hold\n"
    "                         (default DIR/../pod-resources/kubelet.sock)\n"
    "  --library-dir DIR      the node's directory of libtandem.so, mounted at /opt/tandem/lib in\n"
    "                         containers given a slot (default /var/lib/tandem/lib)\n"
    "  --device-list-strategy envvar (default): the GPU in NVIDIA_VISIBLE_DEVICES; cdi: as a CDI device\n"
    "                         name, nvidia.com/gpu=GPU-<uuid>\n"
    "  --poll-ms MS           how often tandemd and the kubelet are asked (default 1000)\n"
    "  --log LEVEL            error | warn | info | debug (default: TANDEM_LOG, else info)\n"
    "The slots (their time share and memory, how fast their number follows tandemd's measures) are\n"
    "tandemd's configuration, key \"slots\" (docs/kubernetes.md).\n";

int g_wake[2] = {-1, -1};
volatile sig_atomic_t g_stop = 0;

void on_signal(int) {
  g_stop = 1;
  char c = 1;
  [[maybe_unused]] ssize_t n = write(g_wake[1], &c, 1);
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "tandem-device-plugin: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// A message logged when it differs from the last one of its kind (a state that lasts is said once).
class Said {
 public:
  void warn_if_new(const std::string& message) {
    if (message != last_) TANDEM_LOG_WARN("{}", message);
    last_ = message;
  }
  void info_if_changed(const std::string& message) {
    if (!last_.empty()) TANDEM_LOG_INFO("{}", message);
    last_.clear();
  }

 private:
  std::string last_;
};

struct Registration {
  bool registered = false;
  double retry_at = 0, backoff = 1;
  double serve_at = 0;     // when to try serving again after a failure
  uint64_t lost_seen = 0;  // device streams the kubelet ended, as last counted
  double lost_at = 0;      // when one ended and no other is open (0: none)
  Said said;
};

// The kubelet ended the device stream and opened none for a while: it lost the plugin (a
// real kubelet waits for it to register again), so register again.
bool stream_lost(const ResourceEndpoint& e, Registration& r, double now) {
  const uint64_t lost = e.lost_streams();
  if (lost == r.lost_seen || e.open_streams() > 0) {
    r.lost_seen = e.open_streams() > 0 ? lost : r.lost_seen;
    r.lost_at = 0;
    return false;
  }
  if (!r.lost_at) r.lost_at = now;
  if (now - r.lost_at < 2) return false;
  r.lost_seen = lost;
  r.lost_at = 0;
  return true;
}

// gRPC's own messages (a failed bind, a refused connection) at debug level: the plugin says
// what failed in its own words.
void grpc_log(gpr_log_func_args* args) { TANDEM_LOG_DEBUG("grpc: {}", args->message ? args->message : ""); }

}  // namespace

int main(int argc, char** argv) {
  tandem::load_settings(environ, [](const char* m) noexcept { std::fprintf(stderr, "tandem-device-plugin: %s\n", m); });
  std::string tandemd_socket = tandem::setting_text(tandem::SettingId::TANDEM_SOCKET);
  std::string kubelet_dir = "/var/lib/kubelet/device-plugins", pod_resources, log = "info";
  if (tandem::setting_was_set(tandem::SettingId::TANDEM_LOG)) log = tandem::setting_text(tandem::SettingId::TANDEM_LOG);
  AllocateOptions options;
  int poll_ms = 1000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail("missing value for " + a);
      return argv[++i];
    };
    if (a == "--socket") tandemd_socket = value();
    else if (a == "--kubelet-dir") kubelet_dir = value();
    else if (a == "--pod-resources") pod_resources = value();
    else if (a == "--admin-socket") options.grant_socket = value();
    else if (a == "--library-dir") options.host_library_dir = value();
    else if (a == "--device-list-strategy") {
      std::string s = value();
      if (s != "envvar" && s != "cdi") fail("--device-list-strategy: envvar or cdi");
      options.cdi = s == "cdi";
    } else if (a == "--poll-ms") {
      std::string s = value();
      char* end = nullptr;
      long v = std::strtol(s.c_str(), &end, 10);
      if (s.empty() || *end || v < 50 || v > 60000) fail("--poll-ms: milliseconds from 50 to 60000");
      poll_ms = static_cast<int>(v);
    } else if (a == "--log") log = value();
    else if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else fail("unknown argument " + a);
  }
  const char* levels[] = {"error", "warn", "info", "debug"};
  int level = -1;
  for (int l = 0; l < 4; ++l)
    if (log == levels[l]) level = l;
  if (level < 0) fail("unknown log level '" + log + "'");
  tandem::set_log_level(static_cast<tandem::LogLevel>(level));
  if (tandemd_socket.empty() || tandemd_socket.size() >= 108) fail("--socket: a path of 1 to 107 bytes");
  if (kubelet_dir.size() > 80) fail("--kubelet-dir: at most 80 bytes (a UNIX socket path is at most 107)");
  while (kubelet_dir.size() > 1 && kubelet_dir.back() == '/') kubelet_dir.pop_back();
  if (pod_resources.empty()) pod_resources = directory_of(kubelet_dir) + "/pod-resources/kubelet.sock";
  options.host_socket_dir = directory_of(tandemd_socket);
  if (options.grant_socket.empty()) options.grant_socket = tandemd_socket;

  gpr_set_log_function(grpc_log);
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) fail("pipe2 failed");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  TANDEM_LOG_INFO("tandem-device-plugin {}: tandemd {}, kubelet {}, pod-resources {}", TANDEM_VERSION_STRING,
                  tandemd_socket, kubelet_dir, pod_resources);
  SlotBoard board(options);
  ResourceEndpoint endpoints[2] = {{SlotResource::bubble, board, kubelet_dir}, {SlotResource::slo, board, kubelet_dir}};
  Registration registration[2];
  SocketIdentity kubelet_seen;
  std::set<std::string> in_use[2];
  Said tandemd_said, pods_said, serve_said;
  double next_poll = 0;
  const double poll_s = poll_ms / 1000.0;
  while (!g_stop) {
    double now = now_s();
    if (now >= next_poll) {
      next_poll = now + poll_s;
      std::string reply, why;
      std::optional<NodeReport> report;
      // One request, a reply within the poll period: tandemd is never waited on for longer.
      if (tandem::ctl::try_ask(tandemd_socket, tandem::MessageType::status_request,
                               tandem::msg::encode(tandem::msg::StatusRequest{}),
                               tandem::MessageType::status_reply, poll_ms, reply, why))
        report = parse_node_report(reply, why);
      if (report) tandemd_said.info_if_changed("tandemd answers again on " + tandemd_socket);
      else tandemd_said.warn_if_new("tandemd: " + why);
      if (pods_holding(pod_resources, in_use, why)) pods_said.info_if_changed("the kubelet's pod-resources answer again");
      else pods_said.warn_if_new(why + ": slots held by pods are not known (free ones may be marked unhealthy first)");
      for (const std::string& m : board.update(now_s(), report, in_use)) {
        if (m.rfind("error: ", 0) == 0) TANDEM_LOG_ERROR("{}", m.substr(7));
        else TANDEM_LOG_INFO("{}", m);
      }
    }
    // The kubelet's socket recreated (it restarted): every resource registers again.
    SocketIdentity kubelet = socket_identity(kubelet_dir + "/kubelet.sock");
    const bool kubelet_new = kubelet.exists && !(kubelet == kubelet_seen);
    if (kubelet_new) TANDEM_LOG_INFO("the kubelet's socket {}/kubelet.sock is new: registering", kubelet_dir);
    kubelet_seen = kubelet;
    for (int i = 0; i < 2; ++i) {
      ResourceEndpoint& e = endpoints[i];
      Registration& r = registration[i];
      std::string why;
      if (!e.socket_intact()) {
        if (now < r.serve_at) continue;
        if (e.serving()) TANDEM_LOG_INFO("{}: its socket was removed: serving again", resource_name(e.resource()));
        if (!e.serve(why)) {
          serve_said.warn_if_new(why + " (retrying)");
          r.registered = false;
          r.serve_at = now + r.backoff;
          r.backoff = std::min(30.0, r.backoff * 2);
          continue;
        }
        r = Registration{};
      }
      if (kubelet_new) r = Registration{.lost_seen = e.lost_streams()};
      if (r.registered && stream_lost(e, r, now)) {
        TANDEM_LOG_INFO("{}: the kubelet ended the device stream and opened no other: registering again",
                        resource_name(e.resource()));
        r.registered = false;
      }
      if (r.registered || !kubelet.exists || now < r.retry_at) continue;
      if (e.register_with_kubelet(why)) {
        r.registered = true;
        r.backoff = 1;
        TANDEM_LOG_INFO("{}: registered with the kubelet", resource_name(e.resource()));
        r.said = Said{};
      } else {
        r.said.warn_if_new(why + " (retrying)");
        r.retry_at = now_s() + r.backoff;
        r.backoff = std::min(30.0, r.backoff * 2);
      }
    }
    pollfd p{g_wake[0], POLLIN, 0};
    poll(&p, 1, 250);
  }
  TANDEM_LOG_INFO("tandem-device-plugin: stopping");
  board.stop();
  for (ResourceEndpoint& e : endpoints) e.stop();
  return 0;
}
