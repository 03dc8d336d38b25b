// The public client API (include/tandem/client.h).
#include "tandem/client.h"

#include "process.h"
#include "settings.h"

#ifndef TANDEM_VERSION_STRING
#define TANDEM_VERSION_STRING "0.0.0"
#endif

#define TANDEM_EXPORT __attribute__((visibility("default")))

extern "C" TANDEM_EXPORT const char* tandem_version(void) { return TANDEM_VERSION_STRING; }

extern "C" TANDEM_EXPORT int tandem_write_stats(void) {
  using namespace tandem;
  if (!hook::ensure_ready() || hook::g_disabled) return -1;
  if (!setting_text(SettingId::TANDEM_STATS_FILE)[0]) return -1;
  hook::write_stats_now();
  return 0;
}
