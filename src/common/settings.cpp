#include "settings.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tandem {
namespace {

constexpr SettingInfo kTable[] = {
#define X(name, kind, def, accepted, desc) {#name, SettingKind::kind, def, accepted, desc},
#include "settings_table.def"
#undef X
};
constexpr size_t kCount = sizeof(kTable) / sizeof(kTable[0]);
static_assert(kCount == static_cast<size_t>(SettingId::count));

// Values live in fixed static buffers: the library may load into any process at any time.
constexpr size_t kMaxValue = 4096;
char g_values[kCount][kMaxValue];
bool g_set[kCount];

// Returns the index of `value` among '|'-separated `accepted`, or -1.
int accepted_index(const char* accepted, const char* value) noexcept {
  size_t len = std::strlen(value);
  int index = 0;
  for (const char* p = accepted; *p;) {
    const char* end = std::strchr(p, '|');
    size_t n = end ? static_cast<size_t>(end - p) : std::strlen(p);
    if (n == len && std::strncmp(p, value, n) == 0) return index;
    if (!end) break;
    p = end + 1;
    ++index;
  }
  return -1;
}

// Int settings are non-negative counts and durations.
bool int_valid(const char* value) noexcept {
  if (!*value) return false;
  char* end = nullptr;
  long long v = std::strtoll(value, &end, 10);
  return end && *end == '\0' && v >= 0;
}

void set_value(size_t i, const char* value) noexcept {
  std::snprintf(g_values[i], kMaxValue, "%s", value);
}

}  // namespace

const SettingInfo* setting_table(size_t* count) noexcept {
  if (count) *count = kCount;
  return kTable;
}

bool setting_value_valid(const SettingInfo& info, const char* value) noexcept {
  switch (info.kind) {
    case SettingKind::Enum:
    case SettingKind::Bool: return accepted_index(info.accepted, value) >= 0;
    case SettingKind::Int: return int_valid(value);
    case SettingKind::Text: return std::strlen(value) < kMaxValue;
    case SettingKind::Size: {
      MemorySize size;
      return parse_memory_size(value, size);
    }
  }
  return false;
}

void load_settings(char** env, WarnSink warn) noexcept {
  for (size_t i = 0; i < kCount; ++i) {
    set_value(i, kTable[i].default_value);
    g_set[i] = false;
  }
  if (!env) return;
  for (char** e = env; *e; ++e) {
    const char* entry = *e;
    if (std::strncmp(entry, "TANDEM_", 7) != 0) continue;
    const char* eq = std::strchr(entry, '=');
    if (!eq) continue;
    size_t name_len = static_cast<size_t>(eq - entry);
    for (size_t i = 0; i < kCount; ++i) {
      if (std::strlen(kTable[i].name) != name_len ||
          std::strncmp(kTable[i].name, entry, name_len) != 0)
        continue;
      const char* value = eq + 1;
      if (setting_value_valid(kTable[i], value)) {
        set_value(i, value);
        g_set[i] = true;
      } else if (warn) {
        char msg[512];
        std::snprintf(msg, sizeof msg, "%s='%.64s' is not valid (accepted: %s); using '%s'",
                      kTable[i].name, value, kTable[i].accepted, kTable[i].default_value);
        warn(msg);
      }
    }
  }
}

const char* setting_text(SettingId id) noexcept { return g_values[static_cast<size_t>(id)]; }

bool setting_bool(SettingId id) noexcept { return setting_text(id)[0] == '1'; }

long long setting_int(SettingId id) noexcept { return std::strtoll(setting_text(id), nullptr, 10); }

int setting_enum(SettingId id) noexcept {
  size_t i = static_cast<size_t>(id);
  int index = accepted_index(kTable[i].accepted, g_values[i]);
  return index < 0 ? 0 : index;
}

bool setting_was_set(SettingId id) noexcept { return g_set[static_cast<size_t>(id)]; }

bool parse_memory_size(const char* text, MemorySize& out) noexcept {
  out = MemorySize{};
  if (!text || !*text) return true;  // unset: no size
  char* end = nullptr;
  double number = std::strtod(text, &end);
  if (end == text || !(number > 0) || number > 1e300) return false;
  while (*end == ' ') ++end;
  if (*end == '%') {
    if (end[1] != '\0' || number > 100) return false;
    out.percent = number;
    out.is_percent = true;
    out.empty = false;
    return true;
  }
  double scale = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': scale = 1024.0; break;
    case 'm': case 'M': scale = 1024.0 * 1024; break;
    case 'g': case 'G': scale = 1024.0 * 1024 * 1024; break;
    case 't': case 'T': scale = 1024.0 * 1024 * 1024 * 1024; break;
    default: return false;
  }
  if (*end) {
    ++end;
    // Optional "i" and "B" after the unit: 64M, 64MiB and 64MB all mean 64 * 2^20 bytes.
    if (*end == 'i') ++end;
    if (*end == 'B' || *end == 'b') ++end;
    if (*end) return false;
  }
  double bytes = number * scale;
  if (bytes < 1 || bytes > 1.8e19) return false;
  out.bytes = static_cast<unsigned long long>(bytes);
  out.empty = false;
  return true;
}

unsigned long long memory_size_bytes(const MemorySize& size, unsigned long long gpu_total_bytes) noexcept {
  if (size.empty) return 0;
  if (!size.is_percent) return size.bytes;
  return static_cast<unsigned long long>(static_cast<double>(gpu_total_bytes) * size.percent / 100.0);
}

}  // namespace tandem
