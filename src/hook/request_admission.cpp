#include "request_admission.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <ctime>

#include "daemon_link.h"
#include "hooks.h"
#include "progress.h"
#include "real_driver.h"
#include "settings.h"

namespace tandem::hook {

namespace {

std::atomic<bool> g_request_open{false};
std::atomic<uint64_t> g_request_start{0};

void wait_for_bubble(tandem_shm_header* shm, uint32_t seen, uint64_t timeout_ns) noexcept {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull), static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, &shm->bubble_seq, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void admit(tandem_slot* slot, tandem_shm_header* shm, uint64_t arrival) noexcept {
  const uint64_t slo = static_cast<uint64_t>(setting_int(SettingId::TANDEM_SLO_MS)) * 1000000;
  const uint64_t period = static_cast<uint64_t>(setting_int(SettingId::TANDEM_SAMPLE_US)) * 1000;
  const uint64_t stale = static_cast<uint64_t>(setting_int(SettingId::TANDEM_FAIL_OPEN_MS)) * 1000000;
  const uint64_t need = __atomic_load_n(&slot->request_ns, __ATOMIC_ACQUIRE);
  bool waited = false;
  for (;;) {
    uint32_t seq = __atomic_load_n(&shm->bubble_seq, __ATOMIC_ACQUIRE);
    uint32_t phase = __atomic_load_n(&shm->gpu_phase, __ATOMIC_ACQUIRE);
    uint64_t now = monotonic_ns();
    if (phase == TANDEM_GPU_NO_TRAINING) break;
    if (phase == TANDEM_GPU_BUBBLE) {
      uint64_t end = __atomic_load_n(&shm->predicted_bubble_end_ns, __ATOMIC_ACQUIRE);
      if (end == 0 || now + need <= end) break;  // no profile yet, or the bubble holds the request
    }
    if (now >= arrival + slo) break;  // the SLO bounds the wait: run now
    if (now > __atomic_load_n(&shm->daemon_heartbeat_ns, __ATOMIC_ACQUIRE) + stale) break;  // fail open
    waited = true;
    uint64_t left = arrival + slo - now;
    wait_for_bubble(shm, seq, left < 4 * period ? left : 4 * period);
  }
  if (waited) {
    __atomic_fetch_add(&slot->admission_waits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&slot->admission_wait_ns, monotonic_ns() - arrival, __ATOMIC_RELAXED);
  }
}

}  // namespace

void request_launch() noexcept {
  if (g_request_open.load(std::memory_order_relaxed) || g_request_open.exchange(true)) return;
  uint64_t arrival = monotonic_ns();
  tandem_slot* slot = current_slot();
  tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  if (slot && shm) admit(slot, shm, arrival);
  g_request_start.store(monotonic_ns(), std::memory_order_relaxed);  // GPU time starts when admitted
}

void request_synchronized() noexcept {
  if (!g_request_open.exchange(false)) return;
  uint64_t took = monotonic_ns() - g_request_start.load(std::memory_order_relaxed);
  tandem_slot* slot = current_slot();
  if (!slot) return;
  uint64_t mean = __atomic_load_n(&slot->request_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&slot->request_ns, mean ? (mean * 7 + took) / 8 : took, __ATOMIC_RELEASE);
  __atomic_fetch_add(&slot->requests, 1, __ATOMIC_RELAXED);
}

// ---- the synchronization hooks ----
namespace {
inline CUresult synchronized(CUresult r) noexcept {
  if (g_role == TANDEM_ROLE_INFERENCE) request_synchronized();
  return r;
}
}  // namespace

CUresult hook_cuStreamSynchronize(CUstream s) noexcept { return synchronized(g_real.cuStreamSynchronize(s)); }
CUresult hook_cuStreamSynchronize_ptsz(CUstream s) noexcept {
  return synchronized(g_real.cuStreamSynchronize_ptsz(s));
}
CUresult hook_cuCtxSynchronize() noexcept { return synchronized(g_real.cuCtxSynchronize()); }
CUresult hook_cuEventSynchronize(CUevent e) noexcept { return synchronized(g_real.cuEventSynchronize(e)); }

}  // namespace tandem::hook
