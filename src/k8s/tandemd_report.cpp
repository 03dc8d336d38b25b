#include "tandemd_report.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace tandem::k8s {

namespace {

using nlohmann::json;

// Each reader fails (false) on a missing field or a wrong type; a number must be finite.
bool read(const json& j, const char* key, double& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>())) return false;
  out = it->get<double>();
  return true;
}

bool read(const json& j, const char* key, uint64_t& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  out = it->get<uint64_t>();
  return true;
}

bool read(const json& j, const char* key, uint32_t& out) {
  uint64_t v = 0;
  if (!read(j, key, v) || v > UINT32_MAX) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

bool read(const json& j, const char* key, bool& out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return false;
  out = it->get<bool>();
  return true;
}

bool valid_uuid(const std::string& u) {
  return u.size() == 32 && u.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool read_online(const json& j, bool slo, OnlineReport& o) {
  if (!j.is_object() || !read(j, "clients", o.clients) || !read(j, "measured", o.measured)) return false;
  auto h = j.find("headroom");
  if (h == j.end()) return false;
  if (!h->is_null()) {
    if (!h->is_number() || !std::isfinite(h->get<double>())) return false;
    o.headroom = h->get<double>();
  }
  if (!slo) return true;
  return read(j, "active", o.active) && read(j, "training_duty", o.training_duty) &&
         read(j, "saturated", o.saturated) && read(j, "below_floor", o.below_floor);
}

bool read_gpu(const json& g, GpuReport& r, std::string& error) {
  auto uuid = g.find("uuid");
  if (uuid == g.end() || !uuid->is_string() || !valid_uuid(uuid->get<std::string>()))
    return error = "a GPU without a 32-digit hex uuid", false;
  r.uuid = uuid->get<std::string>();
  if (!read(g, "verified", r.verified))
    return error = "GPU " + r.uuid + " has no verified flag (a tandemd older than this plugin?)", false;
  auto c = g.find("capacity");
  if (c == g.end() || !c->is_object())
    return error = "GPU " + r.uuid + " has no capacity (a tandemd older than this plugin?)", false;
  auto policy = c->find("policy");
  if (policy == c->end() || !policy->is_string()) return error = "GPU " + r.uuid + ": no policy", false;
  r.slo_policy = policy->get<std::string>() == "slo";
  auto online = c->find("online");
  if (!read(*c, "measured_s", r.measured_s) || !read(*c, "bubble_share", r.bubble_share) ||
      !read(*c, "pressure", r.pressure) || !read(*c, "memory_total_bytes", r.memory_total_bytes) ||
      !read(*c, "training_peak_bytes", r.training_peak_bytes) || online == c->end() ||
      !read_online(*online, r.slo_policy, r.online))
    return error = "GPU " + r.uuid + ": a capacity field is missing or of the wrong type", false;
  return true;
}

}  // namespace

std::optional<NodeReport> parse_node_report(const std::string& status_json, std::string& error) {
  json j = json::parse(status_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error = "the status is not a JSON object", std::nullopt;
  NodeReport r;
  auto daemon = j.find("daemon");
  if (daemon == j.end() || !daemon->is_object()) return error = "the status has no daemon object", std::nullopt;
  auto pid = daemon->find("pid");
  if (pid == daemon->end() || !pid->is_number_integer() || !read(*daemon, "uptime_s", r.uptime_s))
    return error = "the status's daemon has no pid or uptime", std::nullopt;
  r.daemon_pid = pid->get<int64_t>();
  auto slots = daemon->find("kubernetes_slots");
  if (slots == daemon->end()) return error = "tandemd reports no kubernetes_slots (a tandemd older than this plugin?)", std::nullopt;
  std::string why;
  if (!apply_slot_config(*slots, r.slots, why)) return error = "kubernetes_slots: " + why, std::nullopt;
  auto gpus = j.find("gpus");
  if (gpus == j.end() || !gpus->is_array()) return error = "the status has no gpus list", std::nullopt;
  for (const json& g : *gpus) {
    GpuReport gpu;
    if (!read_gpu(g, gpu, error)) return std::nullopt;
    r.gpus.push_back(std::move(gpu));
  }
  return r;
}

}  // namespace tandem::k8s
