// What tandemd believes of one client: its page (include/tandem/shm_abi.h), read once per
// period and bounded. A client writes its page freely, so nothing in it is trusted: a counter
// that goes backwards keeps its last value, one that jumps further than any real process could
// in one period advances by the limit, a completion count never passes what was recorded,
// timestamps never lie in the future, and sizes, latencies and targets are clamped to ranges
// no real value leaves. The daemon's decisions (and every sum it forms) read only this view.
#pragma once
#include <cstdint>

#include "tandem/shm_abi.h"

namespace tandem::scheduler {

// The plausibility limits, per period: far above anything a real process does (a period is
// 1 ms by default; 2^24 launches or 2^44 ns, almost 5 hours, of estimated work in one is beyond
// any GPU, even for a daemon descheduled for a while).
struct ClientBounds {
  static constexpr uint64_t kLaunchesPerPeriod = 1ull << 24;
  static constexpr uint64_t kWorkNsPerPeriod = 1ull << 44;  // issued, completed, tokens, waits
  // A client's clock reading may be a little ahead of the one the daemon took at the start of
  // its period (it wrote after the daemon read the time): beyond this it is no reading.
  static constexpr uint64_t kClockSlackNs = 1000000000ull;
  static constexpr uint64_t kMaxBytes = 1ull << 50;          // 1 PiB: any memory figure
  static constexpr uint64_t kMaxDurationNs = 3600ull * 1000000000ull;  // latencies, request times
  static constexpr uint32_t kMaxSloUs = 3600u * 1000000u;
  static constexpr uint32_t kMaxRequestsOpen = 1u << 20;
  static constexpr uint32_t kMaxSms = 1u << 16;
};

// The page's fields, each bounded against the previous view (a fresh view is all zeros, as a
// fresh page is). `violations` counts the values that had to be bounded since the slot was
// claimed; `last_violation` names the latest (a static string). Bounds a benign client can
// meet are applied without counting: completions above what was recorded or issued (the copy
// reads the recorded count first, and a marker may be recorded and pass in between) and
// timestamps ahead of the daemon's by less than kClockSlackNs.
struct ClientView {
  tandem_client_page v{};
  uint64_t violations = 0;
  const char* last_violation = nullptr;
};

// Copies a page with one atomic load per 8-byte word (no torn 64-bit field).
tandem_client_page snapshot_page(const tandem_client_page* page) noexcept;

// `raw` bounded against the view it replaces (in place: the daemon does this for every client
// every period). `now_ns` bounds timestamps, `control_seq` the latency interval a client may
// claim to have measured.
void bound_client_view(ClientView& view, const tandem_client_page& raw, uint64_t now_ns, uint32_t control_seq) noexcept;

}  // namespace tandem::scheduler
