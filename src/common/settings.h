// tandem settings: one table (settings_table.def), read once from `environ` into static
// storage. No allocation and no libc getenv: safe to call from the first hooked driver call.
#pragma once
#include <cstddef>
#include <cstdint>

#include "duration.h"

namespace tandem {

enum class SettingKind { Enum, Bool, Text, Int, Size, Duration };

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
  const char* accepted;  // '|'-separated for Enum and Bool; "MIN to MAX..." for Duration and Int
  const char* description;
  DurationSpec duration;   // Duration: a bare number's unit (from the name), range and resolution
  long long int_min, int_max;  // Int: the range
};

// The static table, in declaration order.
const SettingInfo* setting_table(size_t* count) noexcept;

// Values after load_settings(): always a valid value (the default if unset or invalid).
const char* setting_text(SettingId id) noexcept;
bool setting_bool(SettingId id) noexcept;
long long setting_int(SettingId id) noexcept;
// A time setting (kind Duration) in nanoseconds: within its range, a whole number of its
// resolution, so that scaling it to the consumer's unit neither overflows nor rounds.
// (setting_int on one gives whole units of its name, truncated: 23 for TANDEM_SLO_MS=23.24.)
uint64_t setting_ns(SettingId id) noexcept;
// Index of the value among the Enum's accepted values.
int setting_enum(SettingId id) noexcept;
// True when the variable was present (and valid) in the environment.
bool setting_was_set(SettingId id) noexcept;

// Reads every TANDEM_* variable from `env` (a NULL-terminated environ-style array).
// Invalid values produce one warning each through `warn` and fall back to the default.
using WarnSink = void (*)(const char* message) noexcept;
void load_settings(char** env, WarnSink warn) noexcept;

// Checks `value` against the setting's accepted values; Text is always valid.
bool setting_value_valid(const SettingInfo& info, const char* value) noexcept;

// A memory size: bytes with an optional K, M, G or T suffix (powers of 1024; "KiB", "MB" and
// the like are accepted too), or a percentage of the GPU ("50%"). Empty means "no size".
struct MemorySize {
  unsigned long long bytes = 0;  // when !is_percent
  double percent = 0;            // when is_percent: 0 < percent <= 100
  bool is_percent = false;
  bool empty = true;
  bool operator==(const MemorySize&) const = default;
};
bool parse_memory_size(const char* text, MemorySize& out) noexcept;
// The size in bytes on a GPU of `gpu_total_bytes` (0 when empty).
unsigned long long memory_size_bytes(const MemorySize& size, unsigned long long gpu_total_bytes) noexcept;

}  // namespace tandem
