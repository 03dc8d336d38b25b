// The hook's side of the memory pool (TANDEM_MEM_POOL=1; docs/memory.md): the ChunkPool
// (src/memory) on the real driver and tandemd's socket, and what memory_hooks.cpp routes to it.
#pragma once
#include <cstdint>

#include "chunk_pool.h"
#include "cuda_abi.h"

namespace tandem::hook {

// True when the pool serves this process (set up at the first pooled allocation; an
// unsupported device or a bad setting turns it off for good, with the reason logged once).
bool pool_serves() noexcept;
// The pool's chunks are memory of the device current at its first pooled allocation, mapped for
// that device alone: false while another device is current (that allocation goes to the driver;
// logged once).
bool pool_device_current() noexcept;
// The stream of a stream-ordered allocation or free on `s`, for reuse in stream order
// (chunk_pool.h); none (stream 0) for a per-thread default stream.
memory::StreamTag pool_stream_tag(CUstream s, bool per_thread) noexcept;
// A pooled block of `bytes` (already charged to the quota), or 0; `stream`: a stream-ordered
// allocation's (pool_stream_tag), else none.
CUdeviceptr pool_allocate(uint64_t bytes, const memory::StreamTag& stream = {}) noexcept;
bool pool_owns(CUdeviceptr ptr) noexcept;
// Bytes of chunks this process holds with no live block in them (0: pool off): memory it
// could use at once, which cuMemGetInfo counts as free.
uint64_t pool_idle_bytes() noexcept;
// Frees a pooled block (stream-ordered when `ordered`); `bytes` gets its charged size.
bool pool_free(CUdeviceptr ptr, bool ordered, CUstream s, bool per_thread, uint64_t* bytes,
               const memory::StreamTag& tag = {}) noexcept;
// The size a pooled allocation of `bytes` is charged (rounded as the pool allocates it).
uint64_t pool_charge(uint64_t bytes) noexcept;
// From the progress thread: gives idle chunks back when over the quota (training asked by
// tandemd), or past twice the watermark of idle memory (inference, SIRIUS's InferRelease).
void pool_tick() noexcept;
// The device whose memory the pool's chunks are, when it serves (false: off or not set up yet;
// never sets it up).
bool pool_device(CUdevice* dev) noexcept;
// What the device's memory pool reports while tandem's pool serves its stream-ordered
// allocations (mempool_hooks.cpp): chunks held and blocks live, now and at their peak.
struct PoolLevels {
  uint64_t held = 0, live = 0, held_peak = 0, live_peak = 0;
};
PoolLevels pool_levels() noexcept;
void pool_reset_peaks(bool held, bool live) noexcept;
// Gives idle chunks back (to tandemd when registered) until at most `keep_bytes` are held,
// after the pending frees finished (a synchronization when needed). Returns the bytes given.
uint64_t pool_trim_to(uint64_t keep_bytes) noexcept;
// From the progress thread, every tick: the most bytes of blocks live at once over the last
// 2-4 s (two windows of 2 s), what the process's steps use (0: pool off). tandemd takes no more
// of an unmodified training job's memory than it holds beyond this (docs/memory.md).
uint64_t pool_working_set(uint64_t now_ns) noexcept;
// For the stats file (`on` false: the pool is off).
struct PoolFigures {
  bool on = false;
  memory::PoolStats pool;
};
PoolFigures pool_figures() noexcept;
// Fork, in the child: the pool is the parent's (its chunks, its registration with tandemd, its
// lock, which a parent's thread may hold in the middle of a handover). The child starts with
// none: a pooled allocation there sets up a pool of its own.
void pool_after_fork_child() noexcept;

}  // namespace tandem::hook
