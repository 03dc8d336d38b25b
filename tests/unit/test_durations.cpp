// Durations as people write them (src/common/duration.h) and the time settings that use them
// (settings_table.def): forms, units, exactness, and what is refused with a warning.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "duration.h"
#include "settings.h"
#include "settings_env.h"

using namespace tandem;

namespace {

constexpr DurationSpec kMs{kNsPerMs, 0, UINT64_MAX, 1};

uint64_t ns_of(const char* text, const DurationSpec& spec = kMs) {
  DurationResult r = parse_duration(text, spec);
  INFO(text << ": " << duration_error_text(r.error));
  REQUIRE(r.ok());
  return r.ns;
}

DurationError error_of(const char* text, const DurationSpec& spec = kMs) {
  return parse_duration(text, spec).error;
}

auto& g_warnings = test::g_setting_warnings;
void load(std::vector<std::string> vars) { test::load_env(std::move(vars)); }

}  // namespace

TEST_CASE("durations: a bare number is in the setting's unit, fractions included") {
  CHECK(ns_of("23.24") == 23240000);
  CHECK(ns_of("5.25") == 5250000);
  CHECK(ns_of("100") == 100000000);
  CHECK(ns_of("0") == 0);
  CHECK(ns_of("0.5") == 500000);
  CHECK(ns_of(".5") == 500000);
  CHECK(ns_of("007") == 7000000);
  CHECK(ns_of("1.000") == 1000000);
  CHECK(ns_of("1000", DurationSpec{kNsPerUs, 0, UINT64_MAX, 1}) == 1000000);
  CHECK(ns_of("1.5", DurationSpec{kNsPerS, 0, UINT64_MAX, 1}) == 1500000000);
}

TEST_CASE("durations: explicit units, all the same 5.25 ms") {
  for (const char* text :
       {"5.25", "5250us", "5250\xc2\xb5s", "5.25ms", "0.00525s", "5250000ns", "5250000.000ns"}) {
    INFO(text);
    CHECK(ns_of(text) == 5250000);
  }
  // The unit wins over the setting's own: 2 s in a microsecond setting.
  CHECK(ns_of("2s", DurationSpec{kNsPerUs, 0, UINT64_MAX, 1}) == 2000000000);
}

TEST_CASE("durations: exact decimal arithmetic, no floating-point rounding") {
  // 0.1 + 0.2 style traps: each is an exact number of nanoseconds.
  CHECK(ns_of("0.3") == 300000);
  CHECK(ns_of("23.24ms") == 23240000);
  CHECK(ns_of("4.35s") == 4350000000);
  CHECK(ns_of("0.000000001s") == 1);
  CHECK(ns_of("18446744073709551615ns") == UINT64_MAX);
  CHECK(ns_of("18446744073.709551615s") == UINT64_MAX);
}

TEST_CASE("durations: what is not a duration") {
  CHECK(error_of("") == DurationError::empty);
  CHECK(error_of("-5") == DurationError::negative);
  CHECK(error_of("-0.5ms") == DurationError::negative);
  for (const char* text :
       {"abc", "ms", ".", "5.", "1e3", "5 ms", " 5", "5 ", "+5", "0x10", "5.2.1", "12%", "5ms3"}) {
    INFO(text);
    CHECK(error_of(text) == DurationError::malformed);
  }
  for (const char* text : {"5min", "5h", "5MS", "5sec", "5m"}) {
    INFO(text);
    CHECK(error_of(text) == DurationError::unknown_unit);
  }
}

TEST_CASE("durations: finer than the resolution is refused, not rounded") {
  CHECK(error_of("0.5ns") == DurationError::finer_than_resolution);
  CHECK(error_of("1.0000001") == DurationError::finer_than_resolution);  // 1 ms + 0.1 ns
  CHECK(error_of("0.0000000000000000000000000001s") == DurationError::finer_than_resolution);
  DurationSpec us_steps{kNsPerMs, 0, UINT64_MAX, kNsPerUs};
  CHECK(ns_of("23.24", us_steps) == 23240000);
  CHECK(error_of("23.2405", us_steps) == DurationError::finer_than_resolution);
  CHECK(error_of("1500ns", us_steps) == DurationError::finer_than_resolution);
  CHECK(error_of("500ns", us_steps) == DurationError::finer_than_resolution);
}

TEST_CASE("durations: out of range, overflow included") {
  DurationSpec range{kNsPerUs, 100 * kNsPerUs, 10 * kNsPerS, 1};
  CHECK(ns_of("100", range) == 100000);
  CHECK(ns_of("10s", range) == 10 * kNsPerS);
  CHECK(error_of("99", range) == DurationError::out_of_range);
  CHECK(error_of("0", range) == DurationError::out_of_range);
  CHECK(error_of("10.000001s", range) == DurationError::out_of_range);
  // Beyond 2^64 ns, whatever the digits: never wrapped.
  CHECK(error_of("18446744073709551616ns") == DurationError::out_of_range);
  CHECK(error_of("99999999999999999999") == DurationError::out_of_range);
  CHECK(error_of("99999999999999999999", range) == DurationError::out_of_range);
  CHECK(error_of("99999999999999999999999999999999999999999s") == DurationError::out_of_range);
  CHECK(error_of("18446744074s") == DurationError::out_of_range);
}

TEST_CASE("durations: the settings table's ranges") {
  DurationSpec s;
  REQUIRE(parse_duration_range("100us to 10s, steps of 1us", kNsPerUs, s));
  CHECK(s.unit_ns == kNsPerUs);
  CHECK(s.min_ns == 100000);
  CHECK(s.max_ns == 10 * kNsPerS);
  CHECK(s.resolution_ns == kNsPerUs);
  REQUIRE(parse_duration_range("0 to 3600s", kNsPerMs, s));
  CHECK(s.min_ns == 0);
  CHECK(s.max_ns == 3600 * kNsPerS);
  CHECK(s.resolution_ns == 1);
  CHECK_FALSE(parse_duration_range("integer milliseconds", kNsPerMs, s));
  CHECK_FALSE(parse_duration_range("10s to 1s", kNsPerMs, s));
  CHECK_FALSE(parse_duration_range("1.5us to 1s, steps of 1us", kNsPerMs, s));
  CHECK(unit_of_setting_name("TANDEM_SAMPLE_US") == kNsPerUs);
  CHECK(unit_of_setting_name("TANDEM_SLO_MS") == kNsPerMs);
  CHECK(unit_of_setting_name("TANDEM_BUBBLE_SAMPLES") == 0);
}

TEST_CASE("durations: every time setting has a unit, a range and a valid default") {
  size_t n = 0;
  const SettingInfo* table = setting_table(&n);
  int durations = 0;
  for (size_t i = 0; i < n; ++i) {
    std::string name = table[i].name;
    INFO(name);
    bool timed = name.size() > 3 &&
                 (name.substr(name.size() - 3) == "_US" || name.substr(name.size() - 3) == "_MS");
    CHECK(timed == (table[i].kind == SettingKind::Duration));
    if (table[i].kind != SettingKind::Duration) continue;
    ++durations;
    const DurationSpec& d = table[i].duration;
    CHECK(d.unit_ns == unit_of_setting_name(name));
    CHECK(d.min_ns <= d.max_ns);
    // Scaled to any unit a consumer uses, the largest value stays far from overflow.
    CHECK(d.max_ns <= 86400 * kNsPerS);
    CHECK(parse_duration(table[i].default_value, d).ok());
  }
  CHECK(durations >= 12);
}

TEST_CASE("durations: TANDEM_SLO_MS=23.24 is 23.24 ms, in every form") {
  for (const char* value : {"23.24", "23240us", "23.24ms", "0.02324s", "23240000ns"}) {
    INFO(value);
    load({std::string("TANDEM_SLO_MS=") + value});
    CHECK(g_warnings.empty());
    CHECK(setting_ns(SettingId::TANDEM_SLO_MS) == 23240000);
    CHECK(setting_int(SettingId::TANDEM_SLO_MS) == 23);  // whole milliseconds, for integer readers
    CHECK(setting_was_set(SettingId::TANDEM_SLO_MS));
  }
  load({"TANDEM_SAMPLE_US=5.25ms", "TANDEM_FAIL_OPEN_MS=0.25s", "TANDEM_MEM_HANDOVER_MS=2.5s"});
  CHECK(g_warnings.empty());
  CHECK(setting_ns(SettingId::TANDEM_SAMPLE_US) == 5250000);
  CHECK(setting_ns(SettingId::TANDEM_FAIL_OPEN_MS) == 250000000);
  CHECK(setting_ns(SettingId::TANDEM_MEM_HANDOVER_MS) == 2500000000);
}

TEST_CASE("durations: defaults in nanoseconds when unset") {
  load({"PATH=/bin"});
  CHECK(setting_ns(SettingId::TANDEM_SAMPLE_US) == 1000000);
  CHECK(setting_ns(SettingId::TANDEM_FAIL_OPEN_MS) == 100000000);
  CHECK(setting_ns(SettingId::TANDEM_SLO_MS) == 100000000);
  CHECK(setting_ns(SettingId::TANDEM_ZICO_MAX_WAIT_MS) == 10000000000ull);
  CHECK(setting_int(SettingId::TANDEM_SAMPLE_US) == 1000);
  CHECK(setting_ns(SettingId::TANDEM_LOG) == 0);  // not a time
}

// Issue 30 row 8: a value whose scaled value overflowed hung a gated process; 0 made its
// progress thread spin. Both are refused with one warning naming the variable, the value and
// the default used.
TEST_CASE("durations: TANDEM_SAMPLE_US overflow and 0 are refused with one warning") {
  for (const char* value :
       {"99999999999999999999", "0", "18446744073709551615", "-1", "1e9", "0.5ns", "50"}) {
    INFO(value);
    load({std::string("TANDEM_SAMPLE_US=") + value});
    REQUIRE(g_warnings.size() == 1);
    const std::string& w = g_warnings[0];
    CHECK(w.find("TANDEM_SAMPLE_US") != std::string::npos);
    CHECK(w.find(std::string("'") + value + "'") != std::string::npos);
    CHECK(w.find("using '1000'") != std::string::npos);
    CHECK(w.find("100us to 10s") != std::string::npos);
    CHECK(setting_ns(SettingId::TANDEM_SAMPLE_US) == 1000000);
    CHECK_FALSE(setting_was_set(SettingId::TANDEM_SAMPLE_US));
  }
  load({"TANDEM_SAMPLE_US=99999999999999999999"});
  CHECK(g_warnings[0].find("out of range") != std::string::npos);
  load({"TANDEM_SLO_MS=23.2405"});  // 1 µs steps (the target is published in microseconds)
  REQUIRE(g_warnings.size() == 1);
  CHECK(g_warnings[0].find("finer than its resolution") != std::string::npos);
  CHECK(setting_ns(SettingId::TANDEM_SLO_MS) == 100000000);
}

TEST_CASE("durations: integer settings are range-checked too, without overflow") {
  for (const char* value : {"99999999999999999999", "0", "1001", "-1", "1.5", ""}) {
    INFO(value);
    load({std::string("TANDEM_BUBBLE_SAMPLES=") + value});
    REQUIRE(g_warnings.size() == 1);
    CHECK(g_warnings[0].find("TANDEM_BUBBLE_SAMPLES") != std::string::npos);
    CHECK(setting_int(SettingId::TANDEM_BUBBLE_SAMPLES) == 1);
  }
  load({"TANDEM_BUBBLE_SAMPLES=3", "TANDEM_SLO_PCTL=95", "TANDEM_SLO_TRAINING_SMS=100"});
  CHECK(g_warnings.empty());
  CHECK(setting_int(SettingId::TANDEM_BUBBLE_SAMPLES) == 3);
  CHECK(setting_int(SettingId::TANDEM_SLO_PCTL) == 95);
  CHECK(setting_int(SettingId::TANDEM_SLO_TRAINING_SMS) == 100);
  load({"TANDEM_SLO_PCTL=101", "TANDEM_SLO_TRAINING_SMS=101"});
  CHECK(g_warnings.size() == 2);
}
