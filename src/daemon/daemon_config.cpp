#include "daemon_config.h"

#include <grp.h>
#include <pwd.h>

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "slot_config.h"
#include "tandem/shm_abi.h"

namespace tandem::scheduler {

namespace {

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// A user or group named by number: 0 to 4294967294 ((uid_t)-1 means "no id" to the kernel). A
// larger number must not wrap (4294967296 to 0 would name root). `numeric`: `name` is a number
// (else the caller looks the name up); false, with the reason, when it is out of range.
template <typename Id>
bool numeric_id(const std::string& name, const char* kind, Id& id, bool& numeric, std::string* why) {
  constexpr unsigned long long kMaxId = 4294967294ull;
  numeric = all_digits(name);
  if (!numeric) return true;
  errno = 0;
  unsigned long long value = std::strtoull(name.c_str(), nullptr, 10);
  if (errno == 0 && value <= kMaxId) return id = static_cast<Id>(value), true;
  if (why) *why = std::string(kind) + " id " + name + " is out of range (0 to " + std::to_string(kMaxId) + ")";
  return false;
}

// A slot count: 0 (no cap) to the slots of a GPU. Read as a JSON unsigned integer, so that a
// larger value is refused instead of wrapping (4294967296 as uint32_t is 0: no cap).
bool parse_slots(const nlohmann::json& v, uint32_t& out, std::string& error) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > TANDEM_MAX_SLOTS)
    return error = "expected a number of slots from 0 (no cap) to " + std::to_string(TANDEM_MAX_SLOTS) + ", got " + v.dump(),
           false;
  out = static_cast<uint32_t>(v.get<uint64_t>());
  return true;
}

// ["user:alice", "group:tandem", "user:1001", "*"] -> Principals.
bool parse_principals(const nlohmann::json& v, Principals& out, std::string& error) {
  if (!v.is_array()) return error = "expected a list like [\"user:alice\", \"group:tandem\", \"*\"]", false;
  for (const auto& e : v) {
    std::string s = e.is_string() ? e.get<std::string>() : std::string();
    if (s == "*") {
      out.anyone = true;
    } else if (s.rfind("user:", 0) == 0) {
      uid_t uid;
      if (!resolve_user(s.substr(5), uid, &error)) return false;
      out.uids.push_back(uid);
    } else if (s.rfind("group:", 0) == 0) {
      gid_t gid;
      if (!resolve_group(s.substr(6), gid, &error)) return false;
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
  if (key == "admin_socket" && v.is_string()) return s.admin_socket = v.get<std::string>(), true;
  if (key == "grant_dir" && v.is_string()) return s.grant_dir = v.get<std::string>(), true;
  if (key == "policy" && v.is_string()) return s.policy = v.get<std::string>(), true;
  if (key == "foreground" && v.is_boolean()) return c.foreground = v.get<bool>(), true;
  if (key == "log" && v.is_string()) return c.log = v.get<std::string>(), true;
  if (key == "metrics" && v.is_string()) return s.metrics_address = v.get<std::string>(), true;
  if (key == "socket_owner" && v.is_string()) {
    uid_t uid;
    if (!resolve_user(v.get<std::string>(), uid, &error)) return false;
    return s.socket_owner = uid, true;
  }
  if (key == "socket_group" && v.is_string()) {
    gid_t gid;
    if (!resolve_group(v.get<std::string>(), gid, &error)) return false;
    return s.socket_group = gid, true;
  }
  if (key == "socket_mode" && v.is_string()) {
    if (!parse_socket_mode(v.get<std::string>(), s.socket_mode)) return error = "expected an octal mode from \"0\" to \"0777\", like \"0660\"", false;
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
  if (key == "max_slots_per_user" && v.is_number()) return parse_slots(v, access.max_slots_per_user, error);
  if (key == "max_slots" && v.is_object()) {
    for (const auto& [user, n] : v.items()) {
      uid_t uid;
      if (!resolve_user(user, uid, &error)) return false;
      if (!parse_slots(n, access.max_slots[uid], error)) return error = user + ": " + error, false;
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

bool resolve_user(const std::string& name, uid_t& uid, std::string* why) {
  bool numeric = false;
  bool ok = numeric_id(name, "user", uid, numeric, why);
  if (numeric) return ok;
  passwd pw{}, *found = nullptr;
  char buffer[4096];
  if (getpwnam_r(name.c_str(), &pw, buffer, sizeof buffer, &found) != 0 || !found) {
    if (why) *why = "unknown user '" + name + "'";
    return false;
  }
  uid = found->pw_uid;
  return true;
}

bool resolve_group(const std::string& name, gid_t& gid, std::string* why) {
  bool numeric = false;
  bool ok = numeric_id(name, "group", gid, numeric, why);
  if (numeric) return ok;
  group gr{}, *found = nullptr;
  char buffer[16384];
  if (getgrnam_r(name.c_str(), &gr, buffer, sizeof buffer, &found) != 0 || !found) {
    if (why) *why = "unknown group '" + name + "'";
    return false;
  }
  gid = found->gr_gid;
  return true;
}

bool parse_socket_mode(const std::string& text, mode_t& mode) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos) return false;
  unsigned long bits = std::strtoul(text.c_str(), nullptr, 8);
  if (bits > 0777) return false;  // permission bits only: no setuid, setgid or sticky bit on a socket
  mode = static_cast<mode_t>(bits);
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
