// The non-blocking streams the process created: what a completion marker for a block freed
// with plain cuMemFree must cover besides the legacy default stream (pool_backend.cpp).
// The legacy stream waits for the work of every blocking stream (per-thread default streams
// included) before its own, so one marker there covers all of them; a non-blocking stream
// does not synchronize with it and needs its own. Creating and destroying streams is rare and
// off the launch path: a small table under a mutex.
#pragma once
#include <cstdint>

#include "cuda_abi.h"

namespace tandem::hook {

constexpr int kMaxTrackedStreams = 32;

void note_stream_created(CUstream s, unsigned int flags) noexcept;
void note_stream_destroyed(CUstream s) noexcept;
// Copies the live non-blocking streams into `out` (room for kMaxTrackedStreams). False when
// they cannot be named: more were created than the table holds (from then on, for good).
// Also false after a tracked stream was destroyed, until a device synchronization that began
// after it (stream_registry_synchronized): a destroyed stream's queued work still runs, and no
// marker can be recorded behind it any more.
bool nonblocking_streams(CUstream* out, int& count) noexcept;
// The destructions known before a device synchronization began (pass it once it returned).
uint64_t stream_destructions() noexcept;
void stream_registry_synchronized(uint64_t destructions_before) noexcept;
void stream_registry_after_fork_child() noexcept;

}  // namespace tandem::hook
