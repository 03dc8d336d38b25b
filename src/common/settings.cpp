#include "settings.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tandem {
namespace {

// A time setting's spec from its row: the bare number's unit from the name's suffix, the range
// and resolution from its Accepted column. Evaluated at compile time: a row that does not say
// them is a build error, not a setting without bounds.
constexpr DurationSpec duration_spec(SettingKind kind, std::string_view name, std::string_view accepted) {
  DurationSpec spec;
  if (kind != SettingKind::Duration) return spec;
  uint64_t unit = unit_of_setting_name(name);
  if (unit == 0 || !parse_duration_range(accepted, unit, spec))
    throw "a Duration setting's name ends in _NS, _US, _MS or _S, and its Accepted column reads "
          "'MIN to MAX' or 'MIN to MAX, steps of STEP'";
  return spec;
}

// An Int setting's range: its Accepted column's leading "integer MIN to MAX" when it has one,
// else any non-negative int (every consumer stores it in an int at most).
struct IntRange {
  long long min = 0, max = INT_MAX;
};
constexpr IntRange int_range(std::string_view accepted) {
  IntRange r;
  auto number = [&](size_t& i, long long& out) {
    size_t start = i;
    for (out = 0; i < accepted.size() && accepted[i] >= '0' && accepted[i] <= '9'; ++i) {
      if (i - start == 9) throw "an Int setting's range has numbers of at most 9 digits";
      out = out * 10 + (accepted[i] - '0');
    }
    return i > start;
  };
  constexpr std::string_view kInteger = "integer ", kTo = " to ";
  if (accepted.substr(0, kInteger.size()) != kInteger) return r;
  size_t i = kInteger.size();
  long long lo = 0, hi = 0;
  if (!number(i, lo) || accepted.substr(i, kTo.size()) != kTo) return r;
  i += kTo.size();
  if (!number(i, hi) || hi < lo) throw "an Int setting's range reads 'integer MIN to MAX'";
  return IntRange{lo, hi};
}

constexpr SettingInfo kTable[] = {
#define X(name, kind, def, accepted, desc)                                                               \
  {#name, SettingKind::kind, def, accepted, desc, duration_spec(SettingKind::kind, #name, accepted), \
   int_range(accepted).min, int_range(accepted).max},
#include "settings_table.def"
#undef X
};
constexpr size_t kCount = sizeof(kTable) / sizeof(kTable[0]);
static_assert(kCount == static_cast<size_t>(SettingId::count));

// Values live in fixed static buffers: the library may load into any process at any time.
constexpr size_t kMaxValue = 4096;
char g_values[kCount][kMaxValue];
bool g_set[kCount];
// Parsed once at load (no strtoll on a path that runs every tick): Int and Duration values.
long long g_int[kCount];
uint64_t g_ns[kCount];

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

// An Int setting's value: decimal digits within the row's range (no sign, no overflow; by
// hand, as strtoll would set the host program's errno).
bool parse_int(const SettingInfo& info, const char* value, long long& out) noexcept {
  long long v = 0;
  const char* p = value;
  for (; *p >= '0' && *p <= '9'; ++p) {
    if (v > (LLONG_MAX - 9) / 10) return false;  // beyond every range
    v = v * 10 + (*p - '0');
  }
  if (p == value || *p || v < info.int_min || v > info.int_max) return false;
  out = v;
  return true;
}

// Why `value` is not valid for `info` (a few words), or nullptr when it is.
const char* refusal(const SettingInfo& info, const char* value) noexcept {
  switch (info.kind) {
    case SettingKind::Enum:
    case SettingKind::Bool: return accepted_index(info.accepted, value) >= 0 ? nullptr : "not one of the accepted values";
    case SettingKind::Int: {
      long long v = 0;
      return parse_int(info, value, v) ? nullptr : "not an integer in range";
    }
    case SettingKind::Text: return std::strlen(value) < kMaxValue ? nullptr : "too long";
    case SettingKind::Size: {
      MemorySize size;
      return parse_memory_size(value, size) ? nullptr : "not a size";
    }
    case SettingKind::Duration: {
      DurationResult d = parse_duration(value, info.duration);
      return d.ok() ? nullptr : duration_error_text(d.error);
    }
  }
  return "unknown kind";
}

const char* unit_name(uint64_t unit_ns) noexcept {
  switch (unit_ns) {
    case 1: return "nanoseconds";
    case kNsPerUs: return "microseconds";
    case kNsPerMs: return "milliseconds";
    default: return "seconds";
  }
}

// Stores a valid value (its parsed form too).
void set_value(size_t i, const char* value) noexcept {
  std::snprintf(g_values[i], kMaxValue, "%s", value);
  g_int[i] = 0;
  g_ns[i] = 0;
  if (kTable[i].kind == SettingKind::Int) parse_int(kTable[i], value, g_int[i]);
  if (kTable[i].kind == SettingKind::Duration) {
    g_ns[i] = parse_duration(value, kTable[i].duration).ns;
    g_int[i] = static_cast<long long>(g_ns[i] / kTable[i].duration.unit_ns);
  }
}

}  // namespace

const SettingInfo* setting_table(size_t* count) noexcept {
  if (count) *count = kCount;
  return kTable;
}

bool setting_value_valid(const SettingInfo& info, const char* value) noexcept { return refusal(info, value) == nullptr; }

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
      const char* why = refusal(kTable[i], value);
      if (!why) {
        set_value(i, value);
        g_set[i] = true;
      } else if (warn) {
        char msg[512];
        if (kTable[i].kind == SettingKind::Duration)
          std::snprintf(msg, sizeof msg,
                        "%s='%.64s' is not valid (%s; accepted: %s, a number of %s or one with a unit: ns, us, ms, "
                        "s); using '%s'",
                        kTable[i].name, value, why, kTable[i].accepted, unit_name(kTable[i].duration.unit_ns),
                        kTable[i].default_value);
        else
          std::snprintf(msg, sizeof msg, "%s='%.64s' is not valid (accepted: %s); using '%s'", kTable[i].name, value,
                        kTable[i].accepted, kTable[i].default_value);
        warn(msg);
      }
    }
  }
}

const char* setting_text(SettingId id) noexcept { return g_values[static_cast<size_t>(id)]; }

bool setting_bool(SettingId id) noexcept { return setting_text(id)[0] == '1'; }

long long setting_int(SettingId id) noexcept { return g_int[static_cast<size_t>(id)]; }

uint64_t setting_ns(SettingId id) noexcept { return g_ns[static_cast<size_t>(id)]; }

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
