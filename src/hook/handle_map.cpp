#include "handle_map.h"

#include <type_traits>

namespace tandem::hook {

bool HandleMap::put(uintptr_t key, uint64_t value) noexcept {
  if (key == 0) return false;
  lock();
  bool stored = false;
  for (size_t i = 0, slot = hash(key); i < kMaxProbe; ++i, slot = (slot + 1) & (kCapacity - 1)) {
    uintptr_t k = keys_[slot].load(std::memory_order_relaxed);
    if (k == key || k == 0) {
      // Value first, then key: a reader that sees the key sees its value.
      values_[slot].store(value, std::memory_order_release);
      if (k == 0) keys_[slot].store(key, std::memory_order_release);
      stored = true;
      break;
    }
  }
  unlock();
  return stored;
}

static_assert(std::is_trivially_destructible_v<HandleMap>, "hooks may run after static destruction");
HandleMap handle_map_detail::g_function_kinds;
HandleMap handle_map_detail::g_graph_exec_kernels;
HandleMap handle_map_detail::g_kernel_costs;
using namespace handle_map_detail;

void handle_maps_lock_all() noexcept {
  g_function_kinds.lock();
  g_graph_exec_kernels.lock();
  g_kernel_costs.lock();
}
void handle_maps_unlock_all() noexcept {
  g_kernel_costs.unlock();
  g_graph_exec_kernels.unlock();
  g_function_kinds.unlock();
}
void handle_maps_reset_locks_in_child() noexcept {
  g_function_kinds.reset_lock();
  g_graph_exec_kernels.reset_lock();
  g_kernel_costs.reset_lock();
}

}  // namespace tandem::hook
