#include "daemon_config.h"

#include <grp.h>
#include <pwd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

namespace tandem::scheduler {

namespace {

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// ["user:alice", "group:tandem", "user:1001", "*"] -> Principals.
bool parse_principals(const nlohmann::json& v, Principals& out, std::string& error) {
  if (!v.is_array()) return error = "expected a list like [\"user:alice\", \"group:tandem\", \"*\"]", false;
  for (const auto& e : v) {
    std::string s = e.is_string() ? e.get<std::string>() : std::string();
    if (s == "*") {
      out.anyone = true;
    } else if (s.rfind("user:", 0) == 0) {
      uid_t uid;
      if (!resolve_user(s.substr(5), uid)) return error = "unknown user '" + s.substr(5) + "'", false;
      out.uids.push_back(uid);
    } else if (s.rfind("group:", 0) == 0) {
      gid_t gid;
      if (!resolve_group(s.substr(6), gid)) return error = "unknown group '" + s.substr(6) + "'", false;
      out.gids.push_back(gid);
    } else {
      return error = "'" + e.dump() + "' is not user:NAME, group:NAME or *", false;
    }
  }
  return true;
}

bool apply_key(const std::string& key, const nlohmann::json& v, DaemonConfig& c, std::string& error) {
  ServerOptions& s = c.server;
  AccessPolicy& access = s.access;
  if (key == "socket" && v.is_string()) return s.socket_path = v.get<std::string>(), true;
  if (key == "policy" && v.is_string()) return s.policy = v.get<std::string>(), true;
  if (key == "foreground" && v.is_boolean()) return c.foreground = v.get<bool>(), true;
  if (key == "log" && v.is_string()) return c.log = v.get<std::string>(), true;
  if (key == "metrics" && v.is_string()) return s.metrics_address = v.get<std::string>(), true;
  if (key == "socket_owner" && v.is_string()) {
    uid_t uid;
    if (!resolve_user(v.get<std::string>(), uid)) return error = "unknown user " + v.dump(), false;
    return s.socket_owner = uid, true;
  }
  if (key == "socket_group" && v.is_string()) {
    gid_t gid;
    if (!resolve_group(v.get<std::string>(), gid)) return error = "unknown group " + v.dump(), false;
    return s.socket_group = gid, true;
  }
  if (key == "socket_mode" && v.is_string()) {
    if (!parse_socket_mode(v.get<std::string>(), s.socket_mode)) return error = "expected an octal mode like \"0660\"", false;
    return true;
  }
  if (key == "roles" && v.is_object()) {
    for (const auto& [role, who] : v.items()) {
      if (role != "training" && role != "inference" && role != "batch-inference")
        return error = "unknown role '" + role + "' (training, inference, batch-inference)", false;
      Principals p;
      if (!parse_principals(who, p, error)) return error = role + ": " + error, false;
      access.roles[role] = p;
    }
    return true;
  }
  if (key == "quota_admins") {
    Principals p;
    if (!parse_principals(v, p, error)) return false;
    return access.quota_admins = p, true;
  }
  if (key == "slots") return apply_slot_config(v, s.scheduler.slots, error);  // docs/kubernetes.md
  if (key == "max_slots_per_user" && v.is_number_unsigned()) return access.max_slots_per_user = v.get<uint32_t>(), true;
  if (key == "max_slots" && v.is_object()) {
    for (const auto& [user, n] : v.items()) {
      uid_t uid;
      if (!resolve_user(user, uid)) return error = "unknown user '" + user + "'", false;
      if (!n.is_number_unsigned()) return error = user + ": expected a number of slots", false;
      access.max_slots[uid] = n.get<uint32_t>();
    }
    return true;
  }
  if (key == "trust_domains" && v.is_object()) {
    for (const auto& [name, who] : v.items()) {
      if (name.empty() || name.find(':') != std::string::npos)
        return error = "domain name '" + name + "' must be non-empty and without ':'", false;
      AccessPolicy::Domain d{name, {}};
      if (!parse_principals(who, d.members, error)) return error = name + ": " + error, false;
      access.trust_domains.push_back(d);
    }
    return true;
  }
  error = "unknown key or wrong type";
  return false;
}

}  // namespace

bool resolve_user(const std::string& name, uid_t& uid) {
  if (all_digits(name)) return uid = static_cast<uid_t>(std::strtoul(name.c_str(), nullptr, 10)), true;
  passwd pw{}, *found = nullptr;
  char buffer[4096];
  if (getpwnam_r(name.c_str(), &pw, buffer, sizeof buffer, &found) != 0 || !found) return false;
  uid = found->pw_uid;
  return true;
}

bool resolve_group(const std::string& name, gid_t& gid) {
  if (all_digits(name)) return gid = static_cast<gid_t>(std::strtoul(name.c_str(), nullptr, 10)), true;
  group gr{}, *found = nullptr;
  char buffer[16384];
  if (getgrnam_r(name.c_str(), &gr, buffer, sizeof buffer, &found) != 0 || !found) return false;
  gid = found->gr_gid;
  return true;
}

bool parse_socket_mode(const std::string& text, mode_t& mode) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos) return false;
  mode = static_cast<mode_t>(std::strtoul(text.c_str(), nullptr, 8));
  return true;
}

bool apply_config(const std::string& text, DaemonConfig& config, std::string& error) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error = "not a JSON object", false;
  for (const auto& [key, v] : j.items()) {
    std::string why;
    if (!apply_key(key, v, config, why)) return error = key + ": " + why, false;
  }
  return true;
}

}  // namespace tandem::scheduler
