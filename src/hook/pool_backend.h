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
// A pooled block of `bytes` (already charged to the quota), or 0.
CUdeviceptr pool_allocate(uint64_t bytes) noexcept;
bool pool_owns(CUdeviceptr ptr) noexcept;
// Bytes of chunks this process holds with no live block in them (0: pool off): memory it
// could use at once, which cuMemGetInfo counts as free.
uint64_t pool_idle_bytes() noexcept;
// Frees a pooled block (stream-ordered when `ordered`); `bytes` gets its charged size.
bool pool_free(CUdeviceptr ptr, bool ordered, CUstream s, bool per_thread, uint64_t* bytes) noexcept;
// The size a pooled allocation of `bytes` is charged (rounded as the pool allocates it).
uint64_t pool_charge(uint64_t bytes) noexcept;
// From the progress thread: gives idle chunks back when over the quota (training asked by
// tandemd), or past twice the watermark of idle memory (inference, SIRIUS's InferRelease).
void pool_tick() noexcept;
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
