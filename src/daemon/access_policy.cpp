#include "access_policy.h"

#include <algorithm>

namespace tandem::scheduler {

bool Principals::matches(const PeerIdentity& who) const {
  if (anyone) return true;
  if (std::find(uids.begin(), uids.end(), who.uid) != uids.end()) return true;
  return std::any_of(gids.begin(), gids.end(), [&](gid_t g) { return who.in_group(g); });
}

std::string Principals::describe() const {
  if (anyone) return "everyone";
  std::string out;
  for (uid_t u : uids) out += (out.empty() ? "uid " : ", uid ") + std::to_string(u);
  for (gid_t g : gids) out += (out.empty() ? "gid " : ", gid ") + std::to_string(g);
  return out.empty() ? "nobody" : out;
}

void AccessPolicy::finalize(uid_t daemon_uid, gid_t socket_gid) {
  Principals trusted;
  trusted.uids = {daemon_uid};
  trusted.gids = {socket_gid};
  roles.try_emplace("training", trusted);
  roles.try_emplace("inference", trusted);
  Principals everyone;
  everyone.anyone = true;
  roles.try_emplace("batch-inference", everyone);
  if (!quota_admins) {
    quota_admins = Principals{};
    quota_admins->uids = {0};
    if (daemon_uid != 0) quota_admins->uids.push_back(daemon_uid);
  }
}

std::string AccessPolicy::quota_refusal(const PeerIdentity& who, uid_t owner) const {
  if (who.uid == owner || (quota_admins && quota_admins->matches(who))) return {};
  return "only uid " + std::to_string(owner) + " or tandemd's quota admins (" +
         (quota_admins ? quota_admins->describe() : std::string("nobody")) + ") may set this quota";
}

std::string AccessPolicy::refusal(const PeerIdentity& who, const std::string& role) const {
  if (role == "none") return {};
  auto it = roles.find(role);
  if (it != roles.end() && it->second.matches(who)) return {};
  return "role '" + role + "' is not permitted for uid " + std::to_string(who.uid) + " (tandemd allows it for " +
         (it == roles.end() ? std::string("nobody") : it->second.describe()) + "; docs/security.md)";
}

uint32_t AccessPolicy::slot_cap(const PeerIdentity& who, uid_t daemon_uid) const {
  if (auto it = max_slots.find(who.uid); it != max_slots.end()) return it->second;
  return who.uid == daemon_uid ? 0 : max_slots_per_user;
}

std::string AccessPolicy::trust_domain(const PeerIdentity& who) const {
  for (const Domain& d : trust_domains)
    if (d.members.matches(who)) return d.name;
  return "uid:" + std::to_string(who.uid);
}

}  // namespace tandem::scheduler
