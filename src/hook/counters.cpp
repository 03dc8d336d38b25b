#include "counters.h"

namespace tandem::hook {

LaunchCounters counters_detail::g_launch{};
using counters_detail::g_launch;

namespace {
MemoryCounters g_memory{};
GateCounters g_gate{};
}  // namespace

MemoryCounters& memory_counters() noexcept { return g_memory; }
GateCounters& gate_counters() noexcept { return g_gate; }

void reset_counters() noexcept {
  for (auto& c : g_launch.by_entry) c.store(0);
  for (auto* c : {&g_launch.graph_launches, &g_launch.graph_kernels,
                  &g_launch.nccl, &g_launch.capture_skipped, &g_memory.allocs, &g_memory.frees,
                  &g_memory.bytes_in_use, &g_memory.peak_bytes, &g_memory.quota_refusals,
                  &g_memory.pressure_calls, &g_memory.reported_release_bytes, &g_gate.waits, &g_gate.wait_ns,
                  &g_gate.fail_open, &g_gate.memory_owed_passes, &g_gate.daemon_links})
    c->store(0);
}

uint64_t kernels_executed() noexcept {
  uint64_t n = g_launch.graph_kernels.load();
  for (Entry e : {Entry::cuLaunchKernel, Entry::cuLaunchKernel_ptsz, Entry::cuLaunchKernelEx,
                  Entry::cuLaunchKernelEx_ptsz, Entry::cuLaunchCooperativeKernel,
                  Entry::cuLaunchCooperativeKernel_ptsz})
    n += g_launch.by_entry[static_cast<size_t>(e)].load();
  return n;
}

}  // namespace tandem::hook
