#include "zico_gate.h"

#include <time.h>

#include <atomic>

#include "counters.h"
#include "futex.h"
#include "log.h"
#include "settings.h"

namespace tandem::hook {

namespace {
// True once the use was above the trough since the last start: the next allocation at the
// trough is an iteration's first. Its exchange lets one thread wait for the iteration.
std::atomic<bool> g_armed{true};
// The threshold tandemd published last seen here. A new one arms the boundary: while the job
// profiled (UINT64_MAX, every allocation "at the trough") nothing re-armed it, and its first
// iteration after learning started without a permit, beside the other job's (both ran out of
// memory).
std::atomic<uint64_t> g_threshold_seen{0};

void notice_threshold(uint64_t trough_bytes) noexcept {
  if (g_threshold_seen.exchange(trough_bytes, std::memory_order_relaxed) != trough_bytes)
    g_armed.store(true, std::memory_order_relaxed);
}

uint64_t in_use() noexcept { return memory_counters().bytes_in_use.load(std::memory_order_relaxed); }

bool permitted(const tandem_slot* slot, uint32_t starts) noexcept {
  return static_cast<int32_t>(__atomic_load_n(&slot->zico_permits, __ATOMIC_ACQUIRE) - starts) > 0;
}
}  // namespace

void zico_boundary(const tandem_slot* slot, uint64_t trough_bytes) noexcept {
  notice_threshold(trough_bytes);
  if (in_use() > trough_bytes) {
    g_armed.store(true, std::memory_order_relaxed);
    return;
  }
  if (!g_armed.exchange(false, std::memory_order_acq_rel)) return;  // this iteration started
  tandem_client_page* page = current_page();
  const tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  uint32_t starts = __atomic_load_n(&page->zico_starts, __ATOMIC_ACQUIRE);
  if (!permitted(slot, starts)) {
    const uint64_t period_ns = setting_ns(SettingId::TANDEM_SAMPLE_US);
    const uint64_t stale_ns = setting_ns(SettingId::TANDEM_FAIL_OPEN_MS);
    const uint64_t max_ns = setting_ns(SettingId::TANDEM_ZICO_MAX_WAIT_MS);
    uint64_t start = monotonic_ns();
    __atomic_store_n(&page->zico_waiting, 1, __ATOMIC_RELEASE);
    for (;;) {
      uint32_t wake = __atomic_load_n(&slot->wake, __ATOMIC_ACQUIRE);
      if (permitted(slot, starts)) break;
      uint64_t now = monotonic_ns();
      bool daemon_gone = !shm || now > __atomic_load_n(&shm->daemon_heartbeat_ns, __ATOMIC_ACQUIRE) + stale_ns;
      if (daemon_gone || now - start > max_ns) {
        count(gate_counters().fail_open);
        TANDEM_LOG_DEBUG("zico: iteration starts without a permit after {} ms ({})", (now - start) / 1000000,
                         daemon_gone ? "tandemd stopped ticking" : "TANDEM_ZICO_MAX_WAIT_MS");
        break;
      }
      if (!__atomic_load_n(&slot->zico_trough_bytes, __ATOMIC_ACQUIRE)) break;  // nobody to wait for now
      futex_wait(&slot->wake, wake, 4 * period_ns);  // bounded: the heartbeat is looked at again
    }
    __atomic_store_n(&page->zico_waiting, 0, __ATOMIC_RELEASE);
    __atomic_fetch_add(&page->zico_wait_ns, monotonic_ns() - start, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&page->zico_starts, starts + 1, __ATOMIC_RELEASE);
}

bool zico_memory_retry(uint64_t& since_ns) noexcept {
  if (!zico_sharing(current_slot())) return false;
  uint64_t now = monotonic_ns();
  if (!since_ns) {
    since_ns = now;
    count(memory_counters().zico_memory_waits);
  } else if (now - since_ns > kZicoMemoryWaitNs) {
    return false;
  }
  struct timespec ts{0, 1000000};  // 1 ms: the other job's progress thread trims every quarter period
  nanosleep(&ts, nullptr);
  return true;
}

void zico_progress_tick() noexcept {
  const tandem_slot* slot = current_slot();
  if (!slot) return;
  uint64_t trough = __atomic_load_n(&slot->zico_trough_bytes, __ATOMIC_ACQUIRE);
  if (!trough) return;
  notice_threshold(trough);
  if (in_use() > trough) g_armed.store(true, std::memory_order_relaxed);
}

}  // namespace tandem::hook
