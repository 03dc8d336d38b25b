#include "gate.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

#include "counters.h"
#include "settings.h"

namespace tandem::hook {

namespace {
void futex_wait(uint32_t* word, uint32_t expected, uint64_t timeout_ns) noexcept {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull), static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);  // shared: no FUTEX_PRIVATE
}
}  // namespace

void gate_wait(tandem_slot* slot, uint64_t cost_ns) noexcept {
  const uint64_t period_ns = static_cast<uint64_t>(setting_int(SettingId::TANDEM_SAMPLE_US)) * 1000;
  const uint64_t stale_ns = static_cast<uint64_t>(setting_int(SettingId::TANDEM_FAIL_OPEN_MS)) * 1000000;
  tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  uint64_t start = 0;
  for (;;) {
    int64_t tokens = __atomic_load_n(&slot->tokens, __ATOMIC_ACQUIRE);
    // Any positive balance admits one kernel (it may overdraw): the in-flight bound, not the
    // balance, is what protects the other job.
    if (tokens > 0 || __atomic_load_n(&slot->gate, __ATOMIC_ACQUIRE) == TANDEM_GATE_OPEN) {
      __atomic_fetch_sub(&slot->tokens, static_cast<int64_t>(cost_ns), __ATOMIC_ACQ_REL);
      break;
    }
    uint64_t now = monotonic_ns();
    if (!start) start = now;
    if (!shm || now > __atomic_load_n(&shm->daemon_heartbeat_ns, __ATOMIC_ACQUIRE) + stale_ns) {
      count(gate_counters().fail_open);  // the daemon is gone or hung: let the kernel run
      break;
    }
    uint32_t wake = __atomic_load_n(&slot->wake, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&slot->tokens, __ATOMIC_ACQUIRE) > 0) continue;
    futex_wait(&slot->wake, wake, 4 * period_ns);  // bounded: re-check the daemon's heartbeat
  }
  if (start) {
    uint64_t waited = monotonic_ns() - start;
    __atomic_fetch_add(&slot->gate_waits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&slot->gate_wait_ns, waited, __ATOMIC_RELAXED);
    count(gate_counters().waits);
    count(gate_counters().wait_ns, waited);
  }
}

}  // namespace tandem::hook
