// tandemctl settings: the table of TANDEM_* settings (src/common/settings_table.def), as text,
// markdown (docs/settings.md's table) or JSON.
#include <cstdio>
#include <string>

#include "ctl_common.h"
#include "settings.h"

namespace tandem::ctl {
namespace {

// Escapes '|' for a markdown table cell.
std::string cell(const char* text) {
  std::string out;
  for (const char* p = text; *p; ++p) {
    if (*p == '|') out += '\\';
    out += *p;
  }
  return out;
}

}  // namespace

int settings_command(bool markdown, bool json) {
  size_t n = 0;
  const SettingInfo* table = setting_table(&n);
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < n; ++i)
      rows.push_back({{"name", table[i].name}, {"default", table[i].default_value},
                      {"accepted", table[i].accepted}, {"description", table[i].description}});
    print_json({{"settings", rows}});
    return 0;
  }
  if (markdown) {
    std::printf("| Variable | Default | Accepted | Description |\n|---|---|---|---|\n");
    for (size_t i = 0; i < n; ++i)
      std::printf("| `%s` | %s | `%s` | %s |\n", table[i].name,
                  table[i].default_value[0] ? ("`" + cell(table[i].default_value) + "`").c_str() : "(empty)",
                  cell(table[i].accepted).c_str(), table[i].description);
  } else {
    for (size_t i = 0; i < n; ++i)
      std::printf("%-22s default %-28s %s\n  accepted: %s\n", table[i].name,
                  table[i].default_value[0] ? table[i].default_value : "(empty)", table[i].description,
                  table[i].accepted);
  }
  return 0;
}

}  // namespace tandem::ctl
