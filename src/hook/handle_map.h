// A fixed-size map from driver handles (CUfunction, CUgraphExec, ...) to a 64-bit value,
// read without locks on the launch path. Inserts take a mutex (they happen once per handle,
// off the fast path). Keys are never removed; erase() stores the value `absent` so that a
// reused handle value is simply overwritten. When the table is full, inserts are dropped
// and lookups miss: callers must treat a miss as "compute it again".
#pragma once
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tandem::hook {

class HandleMap {
 public:
  static constexpr uint64_t kAbsent = ~0ull;
  static constexpr size_t kCapacity = 1 << 14;  // power of two

  // Value for `key`, or kAbsent. Lock-free, no system call.
  uint64_t find(uintptr_t key) const noexcept {
    if (key == 0) return kAbsent;
    for (size_t i = 0, slot = hash(key); i < kMaxProbe; ++i, slot = (slot + 1) & (kCapacity - 1)) {
      uintptr_t k = keys_[slot].load(std::memory_order_acquire);
      if (k == key) return values_[slot].load(std::memory_order_acquire);
      if (k == 0) return kAbsent;
    }
    return kAbsent;
  }

  // Inserts or overwrites. Returns false when the table is full around this key.
  bool put(uintptr_t key, uint64_t value) noexcept;
  void erase(uintptr_t key) noexcept { put(key, kAbsent); }

  // Fork support: the map's mutex must not be held by a thread that does not exist in the child.
  void lock() noexcept { pthread_mutex_lock(&mutex_); }
  void unlock() noexcept { pthread_mutex_unlock(&mutex_); }
  void reset_lock() noexcept { mutex_ = PTHREAD_MUTEX_INITIALIZER; }

 private:
  static constexpr size_t kMaxProbe = 64;
  static size_t hash(uintptr_t key) noexcept {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 40) & (kCapacity - 1);
  }
  std::atomic<uintptr_t> keys_[kCapacity]{};
  std::atomic<uint64_t> values_[kCapacity]{};
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
};

// The process's maps: kernel classification per function handle, kernel counts per graph exec,
// learned GPU time per kernel shape (kernel_cost.h). Static storage, never destroyed: hooks may
// run during and after static destruction (HandleMap is trivially destructible). Inline
// accessors: each launch looks up one or two of them, and a call apiece was part of its cost.
namespace handle_map_detail {
extern HandleMap g_function_kinds;
extern HandleMap g_graph_exec_kernels;
extern HandleMap g_kernel_costs;
}  // namespace handle_map_detail
inline HandleMap& function_kinds() noexcept { return handle_map_detail::g_function_kinds; }
inline HandleMap& graph_exec_kernels() noexcept { return handle_map_detail::g_graph_exec_kernels; }
inline HandleMap& kernel_costs() noexcept { return handle_map_detail::g_kernel_costs; }

void handle_maps_lock_all() noexcept;
void handle_maps_unlock_all() noexcept;
void handle_maps_reset_locks_in_child() noexcept;

}  // namespace tandem::hook
