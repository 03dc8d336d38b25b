// Numeric fields of a client's JSON message, read without trusting their type.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

namespace tandem::scheduler {

// An unsigned integer field: `fallback` when absent (or `j` is no object), nullopt when it is
// anything but a non-negative integer. nlohmann's get<uint64_t>() converts a float with a
// plain cast, undefined behaviour when it is out of range (1e30), so a float is refused.
inline std::optional<uint64_t> uint_field(const nlohmann::json& j, const char* key, uint64_t fallback = 0) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

}  // namespace tandem::scheduler
