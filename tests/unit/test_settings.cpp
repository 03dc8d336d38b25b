#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "settings.h"
#include "settings_env.h"

using namespace tandem;

namespace {
auto& g_warnings = test::g_setting_warnings;
void load(std::vector<std::string> vars) { test::load_env(std::move(vars)); }
}  // namespace

TEST_CASE("settings default when unset") {
  load({"PATH=/bin"});
  CHECK(std::string(setting_text(SettingId::TANDEM_LOG)) == "warn");
  CHECK(setting_enum(SettingId::TANDEM_LOG) == 1);
  CHECK_FALSE(setting_bool(SettingId::TANDEM_DISABLE));
  CHECK(std::string(setting_text(SettingId::TANDEM_REAL_LIBCUDA)) == "libcuda.so.1");
  CHECK_FALSE(setting_was_set(SettingId::TANDEM_LOG));
  CHECK(g_warnings.empty());
}

TEST_CASE("valid values are taken") {
  load({"TANDEM_LOG=debug", "TANDEM_DISABLE=1", "TANDEM_STATS_FILE=/tmp/s-%p.json",
        "TANDEM_ROLE=batch-inference"});
  CHECK(setting_enum(SettingId::TANDEM_LOG) == 3);
  CHECK(setting_bool(SettingId::TANDEM_DISABLE));
  CHECK(std::string(setting_text(SettingId::TANDEM_STATS_FILE)) == "/tmp/s-%p.json");
  CHECK(std::string(setting_text(SettingId::TANDEM_ROLE)) == "batch-inference");
  CHECK(setting_was_set(SettingId::TANDEM_ROLE));
  CHECK(g_warnings.empty());
}

TEST_CASE("an invalid value warns once, naming the variable and the accepted values") {
  load({"TANDEM_LOG=verbose", "TANDEM_DISABLE=yes"});
  REQUIRE(g_warnings.size() == 2);
  CHECK(g_warnings[0].find("TANDEM_LOG") != std::string::npos);
  CHECK(g_warnings[0].find("error|warn|info|debug") != std::string::npos);
  CHECK(g_warnings[1].find("TANDEM_DISABLE") != std::string::npos);
  CHECK(std::string(setting_text(SettingId::TANDEM_LOG)) == "warn");
  CHECK_FALSE(setting_bool(SettingId::TANDEM_DISABLE));
}

TEST_CASE("prefix matches are not confused with other variables") {
  load({"TANDEM_LOGX=debug", "TANDEM_LO=debug", "XTANDEM_LOG=debug"});
  CHECK(std::string(setting_text(SettingId::TANDEM_LOG)) == "warn");
  CHECK(g_warnings.empty());
}

TEST_CASE("every row of the table is well formed") {
  size_t n = 0;
  const SettingInfo* table = setting_table(&n);
  REQUIRE(n == static_cast<size_t>(SettingId::count));
  for (size_t i = 0; i < n; ++i) {
    INFO(table[i].name);
    CHECK(std::string(table[i].name).rfind("TANDEM_", 0) == 0);
    CHECK(std::string(table[i].description).size() > 10);
    CHECK(setting_value_valid(table[i], table[i].default_value));
  }
}

TEST_CASE("memory sizes: suffixes, percentages, and what is refused") {
  MemorySize s;
  CHECK(parse_memory_size("", s));
  CHECK(s.empty);
  CHECK(memory_size_bytes(s, 1000) == 0);
  CHECK(parse_memory_size("4096", s));
  CHECK(s.bytes == 4096);
  for (const char* text : {"64M", "64m", "64MiB", "64MB", "65536K", "0.0625G"}) {
    INFO(text);
    CHECK(parse_memory_size(text, s));
    CHECK(memory_size_bytes(s, 0) == 64ull << 20);
  }
  CHECK(parse_memory_size("2T", s));
  CHECK(s.bytes == 2ull << 40);
  CHECK(parse_memory_size("50%", s));
  CHECK(s.is_percent);
  CHECK(memory_size_bytes(s, 80ull << 30) == 40ull << 30);
  CHECK(parse_memory_size("100%", s));
  for (const char* bad : {"12Q", "-1G", "0", "0%", "101%", "50%x", "G", "1.5GX", "abc", "0.1"}) {
    INFO(bad);
    CHECK_FALSE(parse_memory_size(bad, s));
  }
}

TEST_CASE("an invalid TANDEM_MEM_LIMIT warns once and means no quota") {
  load({"TANDEM_MEM_LIMIT=lots"});
  CHECK(std::string(setting_text(SettingId::TANDEM_MEM_LIMIT)).empty());
  REQUIRE(g_warnings.size() == 1);
  CHECK(g_warnings[0].find("TANDEM_MEM_LIMIT") != std::string::npos);
  load({"TANDEM_MEM_LIMIT=25%"});
  CHECK(std::string(setting_text(SettingId::TANDEM_MEM_LIMIT)) == "25%");
  CHECK(g_warnings.empty());
}
