// The public client API (include/tandem/client.h).
#include "tandem/client.h"

#include "process.h"

#ifndef TANDEM_VERSION_STRING
#define TANDEM_VERSION_STRING "0.0.0"
#endif

#define TANDEM_EXPORT __attribute__((visibility("default")))

extern "C" TANDEM_EXPORT const char* tandem_version(void) { return TANDEM_VERSION_STRING; }

extern "C" TANDEM_EXPORT int tandem_write_stats(void) {
  using namespace tandem;
  if (!hook::ensure_ready()) return -1;
  return hook::write_stats_now() ? 0 : -1;
}
