// The process's device-memory quota (issue: shared memory pool, DESIGN §6). The quota is the
// daemon's (slot.assigned_quota_bytes) when it set one, else TANDEM_MEM_LIMIT, else none.
// Allocations are charged before they reach the driver, so concurrent allocations can never
// together exceed it; what frameworks ask the size of the GPU (cuMemGetInfo, cuDeviceTotalMem)
// is answered with the quota.
#pragma once
#include <cstdint>

namespace tandem::hook {

// The quota in force, in bytes (0: none). A percentage is taken of the current device's size.
uint64_t memory_quota() noexcept;

// The device's memory as a process with a quota sees it, from the device's own figures:
// total is the quota (when smaller than the device), free what is left of it (never below 0,
// even when the daemon lowered the quota below the use; not the device's free, which other
// processes move); `used` becomes the process's own use. False, and nothing changed, without a
// quota.
// cuMemGetInfo and NVML's memory queries answer with it.
// The process's own idle pooled chunks (held, no live block in them) count as free: the
// device counts them as used, yet any allocation of this process gets them at once. False,
// and nothing changed, without a quota and without idle pooled chunks.
bool quota_memory_view(uint64_t& free_bytes, uint64_t& total_bytes, uint64_t& used_bytes) noexcept;
// The same, of given figures (tests): the quota (0: none), the bytes the process has in use
// (charged against the quota) and its idle pooled bytes.
bool memory_view(uint64_t& free_bytes, uint64_t& total_bytes, uint64_t& used_bytes, uint64_t quota, uint64_t in_use,
                 uint64_t idle_pooled) noexcept;

// Adds `bytes` to the process's use if it stays within the quota; else counts a refusal,
// warns (once) naming the quota, and returns false: the caller answers CUDA_ERROR_OUT_OF_MEMORY.
bool charge_memory(uint64_t bytes) noexcept;
// Adds `bytes` whatever the quota (a size known only after the driver answered, e.g. pitch).
void charge_memory_unchecked(uint64_t bytes) noexcept;
void uncharge_memory(uint64_t bytes) noexcept;

// The application's memory-pressure callback (include/tandem/client.h).
using MemoryPressureFn = void (*)(unsigned long long quota_bytes, unsigned long long in_use_bytes, void* user);
void set_memory_pressure_callback(MemoryPressureFn fn, void* user) noexcept;
// Fork: the parent's progress thread may have held the callback's lock; the child's copy is
// re-created unlocked. The callback stays registered (the child runs the same program).
void memory_quota_after_fork_child() noexcept;
// From the progress thread, every tick (and when tandemd changed the quota): calls the
// callback when the process is over its quota, at most every 100 ms unless the quota changed.
void memory_pressure_tick(uint64_t now_ns) noexcept;
// True while the process has a memory-pressure callback (tandem_on_memory_pressure). Lock-free.
bool memory_pressure_registered() noexcept;
// True while the process has a memory-pressure callback and holds more than its quota: tandemd
// lowered the quota and waits for live memory that the program frees at its next safe point.
// Lock-free (the gate's wait asks it).
bool memory_owed() noexcept;
// Whether the callback is due: over the quota, and 100 ms since the last call (at `last_ns`,
// told of `last_quota`) or the quota changed since.
bool pressure_due(uint64_t now_ns, uint64_t quota, uint64_t used, uint64_t last_ns, uint64_t last_quota) noexcept;

}  // namespace tandem::hook
