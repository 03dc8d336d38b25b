// What each client may do, decided from its kernel identity (peer_identity.h) and tandemd's
// configuration (docs/security.md): which users or groups may register in each role, how many
// GPU slots one user may hold, and which users share a trust domain (pooled memory moves only
// inside one).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "peer_identity.h"

namespace tandem::scheduler {

// A set of users and groups ("*": everyone). A group matches a process whose primary or any
// supplementary group it is. A process of a grant (PeerIdentity::grant) matches none: its
// rights are its grant's. `host_uids` and `host_gids` match only a process in tandemd's own
// namespaces (the defaults: tandemd's own uid, root's group), where uid 0 in a container is not.
struct Principals {
  bool anyone = false;
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;
  std::vector<uid_t> host_uids;
  std::vector<gid_t> host_gids;
  bool matches(const PeerIdentity& who) const;
  std::string describe() const;  // "uid 0, gid 120", "everyone", "nobody"
};

struct AccessPolicy {
  // Who may register as training, inference and batch-inference. A role without an entry
  // gets the default (finalize). Role `none` (counted, never gated) is open to every client.
  std::map<std::string, Principals> roles;
  // GPU slots one user may hold on one GPU; `max_slots` overrides per uid. 0: no cap.
  uint32_t max_slots_per_user = 16;
  std::map<uid_t, uint32_t> max_slots;
  // Who may set any registered process's memory quota (a process's own uid always may).
  // Default (finalize): root and tandemd's own uid.
  std::optional<Principals> quota_admins;
  // Users and groups that share pooled memory; a process in none shares only with its own uid.
  struct Domain {
    std::string name;
    Principals members;
  };
  std::vector<Domain> trust_domains;

  // Fills the roles the configuration left out with the safe default: the roles that can hold
  // others back (training under `fill`, inference under `slo`; both, since the policy is per
  // daemon and a client could wait for the other) only for the daemon's own uid and the
  // socket's group (root's group only in tandemd's namespaces, as root); batch-inference for
  // every client that can reach the socket.
  void finalize(uid_t daemon_uid, gid_t socket_gid);

  // Empty when `who` may register as `role`, else why not.
  std::string refusal(const PeerIdentity& who, const std::string& role) const;
  // Empty when `who` may set the quota of the process `owner`, else why not: a quota admin,
  // the process's own user in the same namespaces (both in tandemd's, or one container's), or a
  // process of the same grant; a grant's process nothing else.
  std::string quota_refusal(const PeerIdentity& who, const PeerIdentity& owner) const;
  uint32_t slot_cap(const PeerIdentity& who, uid_t daemon_uid) const;
  // The trust domain's name: a grant's ("grant:<name>"); for a process in tandemd's namespaces
  // a configured domain's, else "uid:<uid>"; for one in a container its uid there and its place
  // ("uid:<uid>@pod:<uid>", "@<runtime>:<id>"): no container shares pooled memory with another's,
  // or with the host's jobs of the same uid.
  std::string trust_domain(const PeerIdentity& who) const;
};

}  // namespace tandem::scheduler
