// Durations as people write them, for every time setting (TANDEM_*_US, TANDEM_*_MS) and every
// time flag (tandemctl's --seconds and --interval; tandemd takes its times as settings): a
// bare number in the setting's own unit, fractions allowed ("23.24" for TANDEM_SLO_MS is
// 23.24 ms), or a number with a unit: ns, us (or µs), ms, s ("5250us", "5.25ms", "0.00525s",
// "5250000ns"). The value is exact integer nanoseconds: decimal digits are never rounded
// through floating point, and nothing can overflow (a value beyond 2^64 ns is out of range,
// like any value beyond the setting's maximum).
//
// Header only, constexpr and allocation-free: the settings table's ranges are parsed at compile
// time, libtandem parses values during its bootstrap, where nothing may allocate, and the
// examples (infer-sim) read their TANDEM_* time settings with it too.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

inline constexpr uint64_t kNsPerUs = 1000;
inline constexpr uint64_t kNsPerMs = 1000000;
inline constexpr uint64_t kNsPerS = 1000000000;

// What a duration accepts: the unit of a bare number, the range (inclusive) and the step the
// consumer carries (a value must be a whole number of steps: 1 µs for a target published in
// microseconds, 1 ns for most).
struct DurationSpec {
  uint64_t unit_ns = kNsPerMs;
  uint64_t min_ns = 0;
  uint64_t max_ns = UINT64_MAX;
  uint64_t resolution_ns = 1;
};

enum class DurationError {
  none,
  empty,
  malformed,  // not digits[.digits] followed by an optional unit
  negative,
  unknown_unit,
  finer_than_resolution,  // e.g. "0.5ns", or "1.0005ms" where the step is 1 µs
  out_of_range,           // below the minimum or above the maximum (2^64 ns at most)
};

struct DurationResult {
  uint64_t ns = 0;
  DurationError error = DurationError::none;
  constexpr bool ok() const { return error == DurationError::none; }
};

namespace duration_detail {

__extension__ typedef unsigned __int128 Wide;

constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The unit named by `suffix`; 0 when it is no unit. Empty: the bare number's unit.
constexpr uint64_t unit_of(std::string_view suffix, uint64_t bare_unit_ns) {
  if (suffix.empty()) return bare_unit_ns;
  if (suffix == "ns") return 1;
  if (suffix == "us" || suffix == "\xc2\xb5s") return kNsPerUs;  // "µs" in UTF-8
  if (suffix == "ms") return kNsPerMs;
  if (suffix == "s") return kNsPerS;
  return 0;
}

}  // namespace duration_detail

// Parses `text` (the whole of it) against `spec`.
constexpr DurationResult parse_duration(std::string_view text, const DurationSpec& spec) noexcept {
  using duration_detail::is_digit;
  using duration_detail::Wide;
  DurationResult r;
  if (text.empty()) return r.error = DurationError::empty, r;
  if (text[0] == '-') return r.error = DurationError::negative, r;
  // The form first: digits[.digits] (or .digits), then the unit.
  size_t i = 0;
  while (i < text.size() && is_digit(text[i])) ++i;
  std::string_view whole_text = text.substr(0, i), fraction_text;
  if (i < text.size() && text[i] == '.') {
    size_t first = ++i;
    while (i < text.size() && is_digit(text[i])) ++i;
    fraction_text = text.substr(first, i - first);
    if (fraction_text.empty()) return r.error = DurationError::malformed, r;  // "5." or "."
  }
  if (whole_text.empty() && fraction_text.empty()) return r.error = DurationError::malformed, r;
  uint64_t unit = duration_detail::unit_of(text.substr(i), spec.unit_ns);
  if (unit == 0) {
    // Letters only after the number: a unit this parser does not know ("5min"); anything
    // else is no duration at all ("1e3", "5 ms", "12%").
    bool letters = true;
    for (size_t k = i; k < text.size(); ++k)
      letters =
          letters && ((text[k] >= 'a' && text[k] <= 'z') || (text[k] >= 'A' && text[k] <= 'Z'));
    return r.error = letters ? DurationError::unknown_unit : DurationError::malformed, r;
  }
  // The value. Leading zeros of the whole part and trailing zeros of the fraction say
  // nothing. More than 20 significant digits before the point is beyond 2^64 ns whatever the
  // unit; more than 27 places after it is finer than 1 ns whatever the unit (at most 1 s).
  while (!whole_text.empty() && whole_text[0] == '0') whole_text.remove_prefix(1);
  while (!fraction_text.empty() && fraction_text.back() == '0') fraction_text.remove_suffix(1);
  if (whole_text.size() > 20) return r.error = DurationError::out_of_range, r;
  if (fraction_text.size() > 27) return r.error = DurationError::finer_than_resolution, r;
  Wide whole = 0, fraction = 0, scale = 1;
  for (char c : whole_text) whole = whole * 10 + static_cast<unsigned>(c - '0');
  for (char c : fraction_text)
    fraction = fraction * 10 + static_cast<unsigned>(c - '0'), scale *= 10;
  // Exact: whole * unit + fraction * unit / scale, the latter a whole number of nanoseconds
  // (both products stay below 10^37, within 128 bits).
  Wide fraction_scaled = fraction * unit;
  if (fraction_scaled % scale != 0) return r.error = DurationError::finer_than_resolution, r;
  Wide ns = whole * unit + fraction_scaled / scale;
  if (ns > UINT64_MAX) return r.error = DurationError::out_of_range, r;
  r.ns = static_cast<uint64_t>(ns);
  if (spec.resolution_ns > 1 && r.ns % spec.resolution_ns != 0)
    return r.error = DurationError::finer_than_resolution, r;
  if (r.ns < spec.min_ns || r.ns > spec.max_ns) return r.error = DurationError::out_of_range, r;
  return r;
}

// A range as the settings table writes it in its Accepted column: "MIN to MAX", optionally
// followed by ", steps of STEP" (each a duration, bare numbers in `unit_ns`). False when the
// text is not of that form. Evaluated at compile time for every time setting.
constexpr bool parse_duration_range(std::string_view text, uint64_t unit_ns,
                                    DurationSpec& spec) noexcept {
  constexpr std::string_view kTo = " to ", kSteps = ", steps of ";
  size_t to = text.find(kTo);
  if (to == std::string_view::npos) return false;
  DurationSpec any{unit_ns, 0, UINT64_MAX, 1};
  DurationResult lo = parse_duration(text.substr(0, to), any);
  std::string_view rest = text.substr(to + kTo.size());
  size_t steps = rest.find(kSteps);
  DurationResult hi = parse_duration(rest.substr(0, steps), any);
  DurationResult step{1, DurationError::none};
  if (steps != std::string_view::npos)
    step = parse_duration(rest.substr(steps + kSteps.size()), any);
  if (!lo.ok() || !hi.ok() || !step.ok() || step.ns == 0 || lo.ns > hi.ns) return false;
  if (lo.ns % step.ns != 0 || hi.ns % step.ns != 0) return false;
  spec = DurationSpec{unit_ns, lo.ns, hi.ns, step.ns};
  return true;
}

// The unit of a bare number for a setting named NAME_NS, NAME_US, NAME_MS or NAME_S; 0 for
// any other name.
constexpr uint64_t unit_of_setting_name(std::string_view name) noexcept {
  auto ends = [&](std::string_view s) {
    return name.size() > s.size() && name.substr(name.size() - s.size()) == s;
  };
  if (ends("_NS")) return 1;
  if (ends("_US")) return kNsPerUs;
  if (ends("_MS")) return kNsPerMs;
  if (ends("_S")) return kNsPerS;
  return 0;
}

// Why a value was refused, in a few words ("finer than its resolution").
constexpr const char* duration_error_text(DurationError error) noexcept {
  switch (error) {
    case DurationError::none:
      return "valid";
    case DurationError::empty:
      return "empty";
    case DurationError::malformed:
      return "not a number with an optional unit";
    case DurationError::negative:
      return "negative";
    case DurationError::unknown_unit:
      return "unknown unit";
    case DurationError::finer_than_resolution:
      return "finer than its resolution";
    case DurationError::out_of_range:
      return "out of range";
  }
  return "invalid";
}

}  // namespace tandem
