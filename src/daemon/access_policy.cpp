#include "access_policy.h"

#include <algorithm>

namespace tandem::scheduler {

bool Principals::matches(const PeerIdentity& who) const {
  if (!who.grant.empty()) return false;
  if (anyone) return true;
  auto in = [](const auto& ids, auto id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); };
  auto any_group = [&](const std::vector<gid_t>& ids) {
    return std::any_of(ids.begin(), ids.end(), [&](gid_t g) { return who.in_group(g); });
  };
  if (in(uids, who.uid) || any_group(gids)) return true;
  return who.host_namespaces && (in(host_uids, who.uid) || any_group(host_gids));
}

std::string Principals::describe() const {
  if (anyone) return "everyone";
  std::string out;
  for (uid_t u : uids) out += (out.empty() ? "uid " : ", uid ") + std::to_string(u);
  for (gid_t g : gids) out += (out.empty() ? "gid " : ", gid ") + std::to_string(g);
  for (uid_t u : host_uids) out += (out.empty() ? "uid " : ", uid ") + std::to_string(u) + " in tandemd's namespaces";
  for (gid_t g : host_gids) out += (out.empty() ? "gid " : ", gid ") + std::to_string(g) + " in tandemd's namespaces";
  return out.empty() ? "nobody" : out;
}

void AccessPolicy::finalize(uid_t daemon_uid, gid_t socket_gid) {
  Principals trusted;
  trusted.host_uids = {daemon_uid};
  // Root's group is root's: a container's root has it too.
  (socket_gid == 0 ? trusted.host_gids : trusted.gids) = {socket_gid};
  roles.try_emplace("training", trusted);
  roles.try_emplace("inference", trusted);
  Principals everyone;
  everyone.anyone = true;
  roles.try_emplace("batch-inference", everyone);
  if (!quota_admins) {
    quota_admins = Principals{};
    quota_admins->host_uids = {0};
    if (daemon_uid != 0) quota_admins->host_uids.push_back(daemon_uid);
  }
}

std::string AccessPolicy::quota_refusal(const PeerIdentity& who, const PeerIdentity& owner) const {
  if (!who.grant.empty()) {
    if (who.grant == owner.grant) return {};
    return "a process of grant '" + who.grant + "' may set the quota of its grant's processes only";
  }
  if (quota_admins && quota_admins->matches(who)) return {};
  const bool same_namespaces = (who.host_namespaces && owner.host_namespaces) ||
                               (!who.host_namespaces && !owner.host_namespaces && !who.place.empty() &&
                                who.place.find('?') == std::string::npos && who.place == owner.place);
  if (owner.grant.empty() && who.uid == owner.uid && same_namespaces) return {};
  return "only uid " + std::to_string(owner.uid) + " in the process's own namespaces or tandemd's quota admins (" +
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
  if (!who.grant.empty()) return max_slots_per_user;
  if (auto it = max_slots.find(who.uid); it != max_slots.end()) return it->second;
  return who.uid == daemon_uid && who.host_namespaces ? 0 : max_slots_per_user;
}

std::string AccessPolicy::trust_domain(const PeerIdentity& who) const {
  if (!who.grant.empty()) return "grant:" + who.grant;
  if (!who.host_namespaces) return "uid:" + std::to_string(who.uid) + "@" + (who.place.empty() ? "?" : who.place);
  for (const Domain& d : trust_domains)
    if (d.members.matches(who)) return d.name;
  return "uid:" + std::to_string(who.uid);
}

}  // namespace tandem::scheduler
