// tandem settings: one table (settings_table.def), read once from `environ` into static
// storage. No allocation and no libc getenv: safe to call from the first hooked driver call.
#pragma once
#include <cstddef>

namespace tandem {

enum class SettingKind { Enum, Bool, Text, Int };

enum class SettingId {
#define X(name, kind, def, accepted, desc) name,
#include "settings_table.def"
#undef X
  count
};

struct SettingInfo {
  const char* name;
  SettingKind kind;
  const char* default_value;
  const char* accepted;  // '|'-separated for Enum and Bool
  const char* description;
};

// The static table, in declaration order.
const SettingInfo* setting_table(size_t* count) noexcept;

// Values after load_settings(): always a valid value (the default if unset or invalid).
const char* setting_text(SettingId id) noexcept;
bool setting_bool(SettingId id) noexcept;
long long setting_int(SettingId id) noexcept;
// Index of the value among the Enum's accepted values.
int setting_enum(SettingId id) noexcept;
// True when the variable was present (and valid) in the environment.
bool setting_was_set(SettingId id) noexcept;

// Reads every TANDEM_* variable from `env` (a NULL-terminated environ-style array).
// Invalid values produce one warning each through `warn` and fall back to the default.
using WarnSink = void (*)(const char* message) noexcept;
void load_settings(char** env, WarnSink warn) noexcept;

// Checks `value` against the setting's accepted values. Enum/Bool only; Text always ok.
bool setting_value_valid(const SettingInfo& info, const char* value) noexcept;

}  // namespace tandem
