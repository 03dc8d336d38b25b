// Stream-capture awareness. Launches into a capturing stream are recorded into a graph, not
// run: the hook must not count, gate, query or synchronize them. A process-wide count of
// open captures keeps the common case (no capture anywhere) free of driver queries.
#pragma once
#include <atomic>

#include "cuda_abi.h"

namespace tandem::hook {

extern std::atomic<int> g_open_captures;

bool stream_is_capturing_slow(CUstream s, bool per_thread_stream) noexcept;

// `per_thread_stream`: the call came through a _ptsz entry, where stream 0 means the
// per-thread default stream.
inline bool stream_is_capturing(CUstream s, bool per_thread_stream) noexcept {
  if (__builtin_expect(g_open_captures.load(std::memory_order_relaxed) == 0, 1)) return false;
  return stream_is_capturing_slow(s, per_thread_stream);
}

}  // namespace tandem::hook
