// The public client API (include/tandem/client.h).
#include "tandem/client.h"

#include "counters.h"
#include "log.h"
#include "memory_quota.h"
#include "online_requests.h"
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

extern "C" TANDEM_EXPORT int tandem_on_memory_pressure(tandem_memory_pressure_fn fn, void* user) {
  using namespace tandem;
  if (!hook::ensure_ready()) return -1;
  hook::set_memory_pressure_callback(fn, user);
  return 0;
}

extern "C" TANDEM_EXPORT void tandem_report_release(unsigned long long bytes) {
  using namespace tandem;
  if (!hook::ensure_ready()) return;
  hook::count(hook::memory_counters().reported_release_bytes, bytes);
  TANDEM_LOG_INFO("the application released {} bytes of cached memory", bytes);
}

extern "C" TANDEM_EXPORT unsigned long long tandem_request_begin(unsigned long long arrival_ns) {
  using namespace tandem;
  if (!hook::ensure_ready()) return 0;
  return hook::explicit_request_begin(arrival_ns);
}

extern "C" TANDEM_EXPORT void tandem_request_end(unsigned long long begin_ns) {
  using namespace tandem;
  if (!hook::ensure_ready()) return;
  hook::explicit_request_end(begin_ns);
}
