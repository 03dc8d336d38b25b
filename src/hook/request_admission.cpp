#include "request_admission.h"

#include "daemon_link.h"
#include "futex.h"
#include "settings.h"

namespace tandem::hook {

void admit_request(tandem_client_page* page, const tandem_shm_header* shm, uint64_t arrival) noexcept {
  if (__atomic_load_n(&shm->policy, __ATOMIC_ACQUIRE) != TANDEM_POLICY_FILL) return;
  const uint64_t slo = setting_ns(SettingId::TANDEM_SLO_MS);
  const uint64_t period = setting_ns(SettingId::TANDEM_SAMPLE_US);
  const uint64_t stale = setting_ns(SettingId::TANDEM_FAIL_OPEN_MS);
  const uint64_t need = __atomic_load_n(&page->request_ns, __ATOMIC_ACQUIRE);
  bool waited = false;
  for (;;) {
    uint32_t seq = __atomic_load_n(&shm->bubble_seq, __ATOMIC_ACQUIRE);
    uint32_t phase = __atomic_load_n(&shm->gpu_phase, __ATOMIC_ACQUIRE);
    uint64_t now = monotonic_ns();
    if (phase == TANDEM_GPU_NO_TRAINING) break;
    // tandemd lets requests hold training now (TANDEM_FILL_ONLINE_HOLD): run at once, it holds
    // training's launches while the request is open.
    if (!__atomic_load_n(&shm->requests_unheld, __ATOMIC_ACQUIRE)) break;
    if (phase == TANDEM_GPU_BUBBLE) {
      uint64_t end = __atomic_load_n(&shm->predicted_bubble_end_ns, __ATOMIC_ACQUIRE);
      if (end == 0 || now + need <= end) break;  // no profile yet, or the bubble holds the request
    }
    if (now >= arrival + slo) break;  // the SLO bounds the wait: run now
    if (now > __atomic_load_n(&shm->daemon_heartbeat_ns, __ATOMIC_ACQUIRE) + stale) break;  // fail open
    waited = true;
    uint64_t left = arrival + slo - now;
    futex_wait(&shm->bubble_seq, seq, left < 4 * period ? left : 4 * period);  // a bubble's start wakes it
  }
  if (waited) {
    __atomic_fetch_add(&page->admission_waits, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&page->admission_wait_ns, monotonic_ns() - arrival, __ATOMIC_RELAXED);
  }
}

}  // namespace tandem::hook
