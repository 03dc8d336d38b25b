// Stream-capture awareness. Launches into a capturing stream are recorded into a graph, not
// run: the hook must not count, gate, query or synchronize them. A process-wide count of
// open captures keeps the common case (no capture anywhere) free of driver queries.
#pragma once
#include <atomic>

#include "cuda_abi.h"
#include "real_driver.h"

namespace tandem::hook {

extern std::atomic<int> g_open_captures;

bool stream_is_capturing_slow(CUstream s, bool per_thread_stream) noexcept;

// `per_thread_stream`: the call came through a _ptsz entry, where stream 0 means the
// per-thread default stream.
inline bool stream_is_capturing(CUstream s, bool per_thread_stream) noexcept {
  if (__builtin_expect(g_open_captures.load(std::memory_order_relaxed) == 0, 1)) return false;
  return stream_is_capturing_slow(s, per_thread_stream);
}

// tandem's own driver calls in an application thread must never end the application's capture:
// while a global-mode capture is open, the driver refuses a "potentially unsafe" call (an event
// or stream query or synchronization) from a thread in the default (global) mode and
// invalidates the capture (seen on an H200); a thread in relaxed mode may make it. `always`:
// switch even with no capture known open, for the calls off the launch path: another thread may
// be beginning one (g_open_captures counts it once cuStreamBeginCapture has returned).
class RelaxedCaptureScope {
 public:
  explicit RelaxedCaptureScope(bool always = false) noexcept
      : active_(always || g_open_captures.load(std::memory_order_relaxed) > 0) {
    if (active_) g_real.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  ~RelaxedCaptureScope() {
    if (active_) g_real.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  bool active_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

}  // namespace tandem::hook
