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
// supplementary group it is.
struct Principals {
  bool anyone = false;
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;
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
  // socket's group; batch-inference for every client that can reach the socket.
  void finalize(uid_t daemon_uid, gid_t socket_gid);

  // Empty when `who` may register as `role`, else why not.
  std::string refusal(const PeerIdentity& who, const std::string& role) const;
  // Empty when `who` may set the quota of a process of `owner`, else why not.
  std::string quota_refusal(const PeerIdentity& who, uid_t owner) const;
  uint32_t slot_cap(const PeerIdentity& who, uid_t daemon_uid) const;
  // The trust domain's name: a configured domain's, else "uid:<uid>".
  std::string trust_domain(const PeerIdentity& who) const;
};

}  // namespace tandem::scheduler
