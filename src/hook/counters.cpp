#include "counters.h"

namespace tandem::hook {

namespace {
LaunchCounters g_launch{};
MemoryCounters g_memory{};
}  // namespace

LaunchCounters& launch_counters() noexcept { return g_launch; }
MemoryCounters& memory_counters() noexcept { return g_memory; }

void reset_counters() noexcept {
  for (auto& c : g_launch.by_entry) c.store(0);
  for (auto* c : {&g_launch.total, &g_launch.graph_launches, &g_launch.graph_kernels,
                  &g_launch.nccl, &g_launch.capture_skipped, &g_memory.allocs, &g_memory.frees,
                  &g_memory.bytes_in_use, &g_memory.peak_bytes})
    c->store(0);
}

}  // namespace tandem::hook
