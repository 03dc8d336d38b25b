// tandem settings: one table (settings_table.def), read once from `environ` into static
// storage. No allocation and no libc getenv: safe to call from the first hooked driver call.
#pragma once
#include <cstddef>

namespace tandem {

enum class SettingKind { Enum, Bool, Text, Int, Size };

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

// A memory size: bytes with an optional K, M, G or T suffix (powers of 1024; "KiB", "MB" and
// the like are accepted too), or a percentage of the GPU ("50%"). Empty means "no size".
struct MemorySize {
  unsigned long long bytes = 0;  // when !is_percent
  double percent = 0;            // when is_percent: 0 < percent <= 100
  bool is_percent = false;
  bool empty = true;
};
bool parse_memory_size(const char* text, MemorySize& out) noexcept;
// The size in bytes on a GPU of `gpu_total_bytes` (0 when empty).
unsigned long long memory_size_bytes(const MemorySize& size, unsigned long long gpu_total_bytes) noexcept;

}  // namespace tandem
