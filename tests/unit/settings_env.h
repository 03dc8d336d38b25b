// Loading the settings table from a made-up environment, collecting its warnings (the unit
// tests of settings and durations).
#pragma once
#include <string>
#include <vector>

#include "settings.h"

namespace tandem::test {

inline std::vector<std::string> g_setting_warnings;

// load_settings() from `vars` ("NAME=value" entries); its warnings land in g_setting_warnings.
inline void load_env(std::vector<std::string> vars) {
  std::vector<char*> env;
  for (auto& v : vars) env.push_back(v.data());
  env.push_back(nullptr);
  g_setting_warnings.clear();
  load_settings(env.data(),
                [](const char* message) noexcept { g_setting_warnings.emplace_back(message); });
}

}  // namespace tandem::test
