// Who is on the other end of a client connection, as the kernel says (DESIGN §7): never what
// the client claims. SO_PEERCRED gives the uid, gid and pid at connect time, the pid already
// translated into tandemd's PID namespace (so a process in a container's own namespace is
// named by the pid tandemd can see); SO_PEERGROUPS its supplementary groups; SO_PEERPIDFD a
// pidfd of that very process (kernels before 6.5: pidfd_open of the SO_PEERCRED pid, which
// can race with pid reuse if the peer exits before the accept is handled). The container is
// named from /proc/<pid>/cgroup, read while the pidfd shows the process alive.
#pragma once
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace tandem::scheduler {

// A process's container, as its cgroup path names it. `runtime` is empty when the path names
// none (a process on the host, a systemd service); `cgroup` is the path either way.
struct ContainerId {
  std::string runtime;  // docker, containerd, cri-o, podman, kubepods
  std::string id;       // the container id (64 hex digits for the runtimes above)
  std::string pod;      // Kubernetes pod uid, when the path has one
  std::string cgroup;   // the unified (v2) path, else the first non-root v1 path
};

// Parses the text of /proc/<pid>/cgroup.
ContainerId container_from_cgroup(std::string_view text);

struct PeerIdentity {
  pid_t pid = 0;  // in tandemd's PID namespace
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (the primary gid may or may not be among them)
  int pidfd = -1;             // owned by whoever holds the identity (Registry: the Client)
  bool pidfd_from_peer = false;  // SO_PEERPIDFD (race-free), not pidfd_open of the pid
  ContainerId container;
  // The process is where tandemd is: the same user namespace (uid_map), PID namespace depth
  // (NSpid) and container (its cgroup's) as tandemd's own, read while the pidfd shows it alive,
  // from files /proc shows any process (a sandboxed tandemd without CAP_SYS_PTRACE cannot read
  // another uid's /proc/<pid>/ns). Only then is its uid the uid on tandemd's side: uid 0 in a
  // container (its own PID or user namespace, or a container's cgroup) is not tandemd's own
  // user, whatever the kernel's uid says (docs/security.md). False when unknown.
  bool host_namespaces = false;
  // Where it is when not there: "pod:<uid>", "<runtime>:<id>", else "pidns:<inode>" (or
  // "pidns:?"). Its trust domain's key: one container's processes share it, no other does.
  std::string place;
  // The grant whose socket it connected through ("": tandemd's own socket). Such a process has
  // exactly the grant's rights (docs/security.md), whatever its uid or groups: reaching that
  // socket, which only its allocation's container has, is its identity.
  std::string grant;
  bool via_admin_socket = false;  // came through tandemd's admin socket (ServerOptions::admin_socket)
  bool in_group(gid_t g) const;
};

// Reads the peer of a connected UNIX socket. False (with `error`) when the kernel does not say
// who it is; a missing pidfd or cgroup is not an error (the identity has pidfd -1, an empty
// container).
bool read_peer_identity(int fd, PeerIdentity& out, std::string& error);

}  // namespace tandem::scheduler
