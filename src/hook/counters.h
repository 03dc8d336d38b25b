// Per-process counters, updated with relaxed atomics on the launch path and read at exit.
#pragma once
#include <atomic>
#include <cstdint>

#include "real_driver.h"

namespace tandem::hook {

struct LaunchCounters {
  // Successful calls per exact entry point. The total of kernels executed is derived (sum of
  // the kernel-launch entries + graph_kernels): one atomic add less on the launch path.
  std::atomic<uint64_t> by_entry[kEntryCount];
  std::atomic<uint64_t> graph_launches;   // cuGraphLaunch calls that ran
  std::atomic<uint64_t> graph_kernels;    // kernel nodes run through graphs
  std::atomic<uint64_t> nccl;             // NCCL kernels executed (graph nodes included)
  std::atomic<uint64_t> capture_skipped;  // launches into a capturing stream (recorded, not run)
};

struct MemoryCounters {
  std::atomic<uint64_t> allocs;
  std::atomic<uint64_t> frees;
  std::atomic<uint64_t> bytes_in_use;
  std::atomic<uint64_t> peak_bytes;
  std::atomic<uint64_t> quota_refusals;  // allocations refused for exceeding the quota
  std::atomic<uint64_t> pressure_calls;  // memory-pressure callbacks made (over quota)
  std::atomic<uint64_t> reported_release_bytes;  // what the application said it released
  std::atomic<uint64_t> zico_memory_waits;  // out-of-memory allocations that waited for memory (Zico)
};

struct GateCounters {
  std::atomic<uint64_t> waits;    // launches that waited for tokens
  std::atomic<uint64_t> wait_ns;  // time they waited
  std::atomic<uint64_t> fail_open;     // waits ended by a stale daemon heartbeat
  std::atomic<uint64_t> inflight_fail_open;  // waits ended because no marker could cover the work in flight
  std::atomic<uint64_t> memory_owed_passes;  // training launches let through to give memory back (gate.cpp)
  std::atomic<uint64_t> daemon_links;  // registrations with a daemon (1 unless it went away)
  std::atomic<uint64_t> collective_holds;    // a grouped rank's NCCL kernels held with its job's (job_ranks.h)
  std::atomic<uint64_t> collective_hold_ns;  // time they waited
};

// Inline: every launch counts through it (a call less on the launch path).
namespace counters_detail {
extern LaunchCounters g_launch;
}  // namespace counters_detail
inline LaunchCounters& launch_counters() noexcept { return counters_detail::g_launch; }
GateCounters& gate_counters() noexcept;
MemoryCounters& memory_counters() noexcept;

// Zeroes every counter (a forked child counts only its own work).
void reset_counters() noexcept;

// Kernels executed: direct launches plus the kernel nodes of launched graphs.
uint64_t kernels_executed() noexcept;

// Forgets the parent's live allocations in a forked child (memory_hooks.cpp).
void memory_tracker_reset_in_child() noexcept;

inline void count(std::atomic<uint64_t>& counter, uint64_t n = 1) noexcept {
  counter.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace tandem::hook
