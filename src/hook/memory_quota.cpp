#include "memory_quota.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>

#include "counters.h"
#include "daemon_link.h"
#include "log.h"
#include "pool_backend.h"
#include "real_driver.h"
#include "settings.h"

namespace tandem::hook {

namespace {

constexpr uint64_t kNotResolved = ~0ull;
std::atomic<uint64_t> g_env_quota{kNotResolved};
std::atomic<bool> g_warned{false};

// TANDEM_MEM_LIMIT in bytes, resolved once (a percentage needs the device's size).
uint64_t env_quota() noexcept {
  uint64_t q = g_env_quota.load(std::memory_order_acquire);
  if (q != kNotResolved) return q;
  MemorySize size;
  parse_memory_size(setting_text(SettingId::TANDEM_MEM_LIMIT), size);  // validated at load
  size_t total = 0;
  if (size.is_percent) {
    CUdevice dev = 0;
    if (g_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;  // e.g. NCCL's context-less threads
    if (g_real.cuDeviceTotalMem_v2(&total, dev) != CUDA_SUCCESS) return 0;  // not yet: no quota for now
  }
  q = memory_size_bytes(size, total);
  g_env_quota.store(q, std::memory_order_release);
  return q;
}

void raise_peak(MemoryCounters& m, uint64_t now) noexcept {
  uint64_t peak = m.peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !m.peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

std::mutex g_pressure_mutex;  // the callback and its argument change together
MemoryPressureFn g_pressure_fn = nullptr;
void* g_pressure_user = nullptr;
std::atomic<bool> g_pressure_set{false};  // g_pressure_fn != nullptr, for readers that take no lock
uint64_t g_last_pressure_ns = 0;                   // progress thread only
uint64_t g_last_pressure_quota = 0;                // the quota the callback was last told of
constexpr uint64_t kPressureInterval = 100000000;  // 100 ms: time to release, no spamming

}  // namespace

uint64_t memory_quota() noexcept {
  if (const tandem_slot* slot = current_slot()) {
    uint64_t assigned = __atomic_load_n(&slot->assigned_quota_bytes, __ATOMIC_ACQUIRE);
    if (assigned) return assigned;
  }
  return env_quota();
}

bool memory_view(uint64_t& free_bytes, uint64_t& total_bytes, uint64_t& used_bytes, uint64_t quota, uint64_t in_use,
                 uint64_t idle_pooled) noexcept {
  if (!quota && !idle_pooled) return false;
  // At most what the device counts as used: the idle chunks are part of it.
  uint64_t idle = std::min(idle_pooled, total_bytes - std::min(total_bytes, free_bytes));
  free_bytes += idle;
  used_bytes -= std::min(used_bytes, idle);
  if (!quota) return true;
  uint64_t left = std::min(quota, total_bytes);
  left = left > in_use ? left - in_use : 0;
  if (quota < total_bytes) {
    // The quota is the process's GPU: its free memory moves only with its own allocations, never
    // with other processes' (an LLM engine sizes its KV cache from it and asserts that it only
    // fell while it profiled; a neighbour's free would break that, its allocation shrink the
    // cache). Whether the device has it is tandemd's arbitration, and a failed allocation says so.
    total_bytes = quota;
    free_bytes = left;
  } else if (left < free_bytes) {
    free_bytes = left;  // a quota above the device: the device is the limit
  }
  used_bytes = in_use;
  return true;
}

bool quota_memory_view(uint64_t& free_bytes, uint64_t& total_bytes, uint64_t& used_bytes) noexcept {
  return memory_view(free_bytes, total_bytes, used_bytes, memory_quota(),
                     memory_counters().bytes_in_use.load(std::memory_order_relaxed), pool_idle_bytes());
}

bool charge_memory(uint64_t bytes) noexcept {
  MemoryCounters& m = memory_counters();
  uint64_t quota = memory_quota();
  uint64_t used = m.bytes_in_use.load(std::memory_order_relaxed);
  do {
    if (quota && (bytes > quota || used > quota - bytes)) {
      count(m.quota_refusals);
      if (!g_warned.exchange(true))
        TANDEM_LOG_WARN("allocation of {} bytes refused: {} of the quota of {} bytes in use ({}); "
                        "further refusals are counted in the stats file (memory.quota_refusals)",
                        bytes, used, quota,
                        current_slot() && current_slot()->assigned_quota_bytes ? "set through tandemd"
                                                                                : "TANDEM_MEM_LIMIT");
      return false;
    }
  } while (!m.bytes_in_use.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  raise_peak(m, used + bytes);
  return true;
}

void charge_memory_unchecked(uint64_t bytes) noexcept {
  MemoryCounters& m = memory_counters();
  raise_peak(m, m.bytes_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void uncharge_memory(uint64_t bytes) noexcept {
  memory_counters().bytes_in_use.fetch_sub(bytes, std::memory_order_relaxed);
}

bool memory_pressure_registered() noexcept { return g_pressure_set.load(std::memory_order_acquire); }

void set_memory_pressure_callback(MemoryPressureFn fn, void* user) noexcept {
  std::lock_guard<std::mutex> lock(g_pressure_mutex);
  g_pressure_fn = fn;
  g_pressure_user = user;
  g_pressure_set.store(fn != nullptr, std::memory_order_release);
}

bool memory_owed() noexcept {
  if (!memory_pressure_registered()) return false;
  uint64_t quota = memory_quota();
  return quota && memory_counters().bytes_in_use.load(std::memory_order_relaxed) > quota;
}

void memory_quota_after_fork_child() noexcept {
  new (&g_pressure_mutex) std::mutex();
  g_last_pressure_ns = 0;
  g_last_pressure_quota = 0;
}

bool pressure_due(uint64_t now_ns, uint64_t quota, uint64_t used, uint64_t last_ns, uint64_t last_quota) noexcept {
  if (!quota || used <= quota) return false;
  // A quota lowered again (tandemd wants more back) is told at once, whatever the interval.
  return now_ns >= last_ns + kPressureInterval || quota != last_quota;
}

void memory_pressure_tick(uint64_t now_ns) noexcept {
  uint64_t quota = memory_quota();
  MemoryCounters& m = memory_counters();
  uint64_t used = m.bytes_in_use.load(std::memory_order_relaxed);
  if (!pressure_due(now_ns, quota, used, g_last_pressure_ns, g_last_pressure_quota)) return;
  g_last_pressure_ns = now_ns;
  g_last_pressure_quota = quota;
  // Held while the callback runs, so that a callback being replaced is never called after
  // set_memory_pressure_callback returned; the callback must not register another.
  std::lock_guard<std::mutex> lock(g_pressure_mutex);
  if (!g_pressure_fn) return;
  count(m.pressure_calls);
  TANDEM_LOG_INFO("over the memory quota ({} of {} bytes): asking the application to release memory", used, quota);
  g_pressure_fn(quota, used, g_pressure_user);
}

}  // namespace tandem::hook
