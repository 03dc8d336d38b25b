#include "peer_identity.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5
#endif

namespace tandem::scheduler {

namespace {

bool is_container_hex(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      if (i > start) parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}

// "<prefix><64 hex>.scope" (systemd cgroup driver) -> the id, else empty.
std::string_view scoped_id(std::string_view component, std::string_view prefix) {
  if (component.substr(0, prefix.size()) != prefix) return {};
  std::string_view rest = component.substr(prefix.size());
  if (rest.size() > 6 && rest.substr(rest.size() - 6) == ".scope") rest.remove_suffix(6);
  return is_container_hex(rest) ? rest : std::string_view{};
}

// A Kubernetes pod uid from "pod<uid>" (cgroupfs) or "kubepods-<qos>-pod<uid_with_underscores>.slice".
std::string pod_uid(std::string_view component) {
  size_t at = component.rfind("pod");  // "kubepods" itself holds one
  if (at == std::string_view::npos || (at != 0 && component.substr(0, 9) != "kubepods-")) return {};
  std::string_view rest = component.substr(at + 3);
  if (rest.size() > 6 && rest.substr(rest.size() - 6) == ".slice") rest.remove_suffix(6);
  if (rest.size() != 36) return {};
  std::string uid(rest);
  std::replace(uid.begin(), uid.end(), '_', '-');
  return uid.find_first_not_of("0123456789abcdef-") == std::string::npos ? uid : std::string{};
}

// Fills runtime/id/pod from one cgroup path; false when it names no container.
bool container_in_path(std::string_view path, ContainerId& out) {
  std::vector<std::string_view> parts = split(path, '/');
  bool kube = false;
  for (std::string_view p : parts) {
    if (p.substr(0, 8) == "kubepods") kube = true;
    if (std::string pod = pod_uid(p); !pod.empty()) out.pod = pod;
  }
  static constexpr std::pair<std::string_view, std::string_view> kScopes[] = {
      {"docker-", "docker"}, {"cri-containerd-", "containerd"}, {"crio-", "cri-o"}, {"libpod-", "podman"}};
  for (size_t i = parts.size(); i-- > 0;) {
    for (const auto& [prefix, runtime] : kScopes)
      if (std::string_view id = scoped_id(parts[i], prefix); !id.empty()) {
        out.runtime = runtime;
        out.id = id;
        return true;
      }
    if (is_container_hex(parts[i])) {  // cgroupfs driver: /docker/<id>, /kubepods/.../pod<uid>/<id>
      bool docker = std::find(parts.begin(), parts.begin() + static_cast<long>(i), "docker") !=
                    parts.begin() + static_cast<long>(i);
      out.runtime = docker ? "docker" : kube ? "kubepods" : "container";
      out.id = parts[i];
      return true;
    }
  }
  out.pod.clear();
  return false;
}

std::string read_text(const std::string& path, size_t most = 65536) {
  std::string text;
  if (int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    char buffer[4096];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof buffer)) > 0 && text.size() < most) text.append(buffer, static_cast<size_t>(n));
    close(fd);
  }
  return text;
}

// How deep a process's PID namespace is (the NSpid line of /proc/<pid>/status: one pid per
// level); 0 when unknown.
size_t pid_depth(const std::string& status) {
  size_t at = status.find("\nNSpid:");
  if (at == std::string::npos) return 0;
  size_t end = status.find('\n', at + 1);
  std::string line = status.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  size_t depth = 0;
  for (size_t i = 0; i < line.size();) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i < line.size()) ++depth;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  }
  return depth;
}

// tandemd's own place, read once.
struct OwnPlace {
  std::string uid_map = read_text("/proc/self/uid_map");
  size_t depth = pid_depth(read_text("/proc/self/status"));
  ContainerId container = container_from_cgroup(read_text("/proc/self/cgroup"));
};

// Fills host_namespaces and place of a live process (its container already read).
void read_place(PeerIdentity& out) {
  static const OwnPlace own;
  const std::string proc = "/proc/" + std::to_string(out.pid);
  const std::string uid_map = read_text(proc + "/uid_map");
  const size_t depth = pid_depth(read_text(proc + "/status"));
  out.host_namespaces = !uid_map.empty() && uid_map == own.uid_map && depth && depth == own.depth &&
                        out.container.id == own.container.id;
  if (!out.container.pod.empty()) {
    out.place = "pod:" + out.container.pod;
  } else if (!out.container.id.empty()) {
    out.place = out.container.runtime + ":" + out.container.id;
  } else {
    struct stat st {};
    out.place = stat((proc + "/ns/pid").c_str(), &st) == 0 ? "pidns:" + std::to_string(st.st_ino) : "pidns:?";
  }
}

}  // namespace

ContainerId container_from_cgroup(std::string_view text) {
  std::string_view unified;
  std::vector<std::string_view> v1;
  for (std::string_view line : split(text, '\n')) {
    size_t a = line.find(':');
    size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    std::string_view path = line.substr(b + 1);
    if (line.substr(0, a) == "0" && b == a + 1) unified = path;
    else if (path != "/") v1.push_back(path);
  }
  ContainerId c;
  c.cgroup = unified.size() > 1 || v1.empty() ? std::string(unified) : std::string(v1.front());
  if (!container_in_path(unified, c))
    for (std::string_view path : v1)
      if (container_in_path(path, c)) break;
  return c;
}

bool PeerIdentity::in_group(gid_t g) const {
  return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
}

bool read_peer_identity(int fd, PeerIdentity& out, std::string& error) {
  out = PeerIdentity{};
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    error = std::string("SO_PEERCRED: ") + std::strerror(errno);
    return false;
  }
  out.pid = cred.pid;
  out.uid = cred.uid;
  out.gid = cred.gid;
  // A pid of 0: the peer is in a PID namespace tandemd cannot see into (its parent's); it has
  // no pid here, so it cannot be watched or shown. Uid and gid still hold.
  // ERANGE: more groups than room; the kernel says how many bytes it needs (at most NGROUPS_MAX).
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 2 && !groups.empty(); ++attempt) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      out.groups.assign(groups.begin(), groups.begin() + glen / sizeof(gid_t));
      break;
    }
    groups.resize(errno == ERANGE ? glen / sizeof(gid_t) : 0);
  }
  int pidfd = -1;
  socklen_t plen = sizeof pidfd;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &plen) == 0 && pidfd >= 0) {
    out.pidfd = pidfd;
    out.pidfd_from_peer = true;
  } else if (out.pid > 0) {
    out.pidfd = static_cast<int>(syscall(SYS_pidfd_open, out.pid, 0));
  }
  if (out.pid <= 0 || out.pidfd < 0) return true;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/cgroup", static_cast<int>(out.pid));
  const std::string text = read_text(path);
  ContainerId container = container_from_cgroup(text);
  PeerIdentity place;
  place.pid = out.pid;
  place.container = container;
  read_place(place);
  // Read by pid: they name the right process only if that process is still alive now.
  pollfd p{out.pidfd, POLLIN, 0};
  if (poll(&p, 1, 0) == 0) {
    out.container = std::move(container);
    out.host_namespaces = place.host_namespaces;
    out.place = std::move(place.place);
  }
  return true;
}

}  // namespace tandem::scheduler
