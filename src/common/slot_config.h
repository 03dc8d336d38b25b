// The Kubernetes slots' configuration (slot_config_types.h) as JSON: tandemd's configuration
// key "slots" (`tandemd --config`), echoed in its status document, from which
// tandem-device-plugin reads it. One parser for both sides, so the plugin reads exactly what
// tandemd accepted.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "slot_config_types.h"

namespace tandem {

// Applies the JSON object over `config` (defaults for keys not given). False, with `error`
// naming the key, for an unknown key, a wrong type or a value out of range.
bool apply_slot_config(const nlohmann::json& j, SlotConfig& config, std::string& error);
// The configuration as a JSON object that apply_slot_config reads back to the same values.
nlohmann::json slot_config_json(const SlotConfig& config);

}  // namespace tandem
