#include "slot_config.h"

#include <cmath>

namespace tandem {

namespace {

constexpr uint32_t kMaxSlotsPerGpu = 64;

bool set_kind(SlotKind& kind, const std::string& text) {
  MemorySize m;
  if (!parse_memory_size(text.c_str(), m) || m.empty) return false;
  kind.memory_text = text;
  kind.memory = m;
  return true;
}

bool apply_kind(const nlohmann::json& j, SlotKind& kind, std::string& error) {
  if (!j.is_object()) return error = "expected an object like {\"share\": 0.1, \"memory\": \"4G\", \"max\": 8}", false;
  for (const auto& [key, v] : j.items()) {
    if (key == "share") {
      if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 1)
        return error = "share: a number in (0, 1], the GPU time of one slot", false;
      kind.share = v.get<double>();
    } else if (key == "memory") {
      if (!v.is_string() || !set_kind(kind, v.get<std::string>()))
        return error = "memory: bytes with a K/M/G/T suffix (\"4G\") or a percentage of the GPU (\"10%\")", false;
    } else if (key == "max") {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > kMaxSlotsPerGpu)
        return error = "max: the devices listed per GPU, 0 to " + std::to_string(kMaxSlotsPerGpu), false;
      kind.max = v.get<uint32_t>();
    } else {
      return error = "unknown key '" + key + "' (share, memory, max)", false;
    }
  }
  return true;
}

// A number in [low, high] (`open_low`: above low).
bool number(const nlohmann::json& v, double low, double high, bool open_low, double& out) {
  if (!v.is_number()) return false;
  double x = v.get<double>();
  if (!std::isfinite(x) || x < low || x > high || (open_low && x == low)) return false;
  out = x;
  return true;
}

}  // namespace

SlotConfig::SlotConfig() {
  bubble.share = 0.1;
  bubble.max = 8;
  set_kind(bubble, "4G");
  slo.share = 0.25;
  slo.max = 4;
  set_kind(slo, "8G");
}

bool apply_slot_config(const nlohmann::json& j, SlotConfig& c, std::string& error) {
  if (!j.is_object()) return error = "expected an object (docs/kubernetes.md)", false;
  struct Fraction { const char* key; double* value; };
  const Fraction fractions[] = {{"margin", &c.margin}, {"hysteresis", &c.hysteresis},
                                {"training_keep", &c.training_keep}, {"slo_headroom", &c.slo_headroom}};
  struct Seconds { const char* key; double* value; };
  const Seconds durations[] = {{"window_s", &c.window_s}, {"fast_window_s", &c.fast_window_s},
                               {"grow_after_s", &c.grow_after_s}, {"min_interval_s", &c.min_interval_s},
                               {"stale_after_s", &c.stale_after_s}};
  for (const auto& [key, v] : j.items()) {
    bool known = false;
    if (key == "bubble" || key == "slo") {
      known = true;
      if (!apply_kind(v, key == "bubble" ? c.bubble : c.slo, error)) return error = key + "." + error, false;
    }
    for (const Fraction& f : fractions)
      if (key == f.key) {
        known = true;
        if (!number(v, 0, 0.95, false, *f.value)) return error = key + ": a number from 0 to 0.95", false;
      }
    for (const Seconds& d : durations)
      if (key == d.key) {
        known = true;
        if (!number(v, 0, 86400, true, *d.value)) return error = key + ": seconds, more than 0 and at most 86400", false;
      }
    if (!known)
      return error = "unknown key '" + key + "' (bubble, slo, margin, hysteresis, training_keep, slo_headroom, window_s, "
                     "fast_window_s, grow_after_s, min_interval_s, stale_after_s)", false;
  }
  return true;
}

nlohmann::json slot_config_json(const SlotConfig& c) {
  auto kind = [](const SlotKind& k) {
    return nlohmann::json{{"share", k.share}, {"memory", k.memory_text}, {"max", k.max}};
  };
  return {{"bubble", kind(c.bubble)}, {"slo", kind(c.slo)}, {"margin", c.margin}, {"hysteresis", c.hysteresis},
          {"training_keep", c.training_keep}, {"slo_headroom", c.slo_headroom}, {"window_s", c.window_s},
          {"fast_window_s", c.fast_window_s}, {"grow_after_s", c.grow_after_s},
          {"min_interval_s", c.min_interval_s}, {"stale_after_s", c.stale_after_s}};
}

}  // namespace tandem
