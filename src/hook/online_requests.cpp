#include "online_requests.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>

#include "daemon_link.h"
#include "futex.h"
#include "green_streams.h"
#include "hooks.h"
#include "progress.h"
#include "real_driver.h"
#include "request_admission.h"
#include "settings.h"

namespace tandem::hook {

std::atomic<uint32_t> g_request_blocks{0};

namespace {

std::atomic<bool> g_explicit{false};
std::atomic<bool> g_transparent_open{false};
std::atomic<uint64_t> g_transparent_start{0};

// Latencies of the requests ended in the daemon's current control interval. Appended at each
// request's end (a synchronization or the client API, never a launch), read by the progress
// thread. Beyond kSamples a request only counts: the percentile is then that of the first ones.
constexpr size_t kSamples = 4096;
std::mutex g_samples_mutex;
uint64_t g_samples[kSamples];
uint32_t g_sample_count = 0;
uint32_t g_interval = 0;  // the control_seq the samples belong to
bool g_fresh = false;     // samples added since the last publication

// The explicit request this thread began last, and when it was admitted: its service time, when
// the same thread ends it (a server thread per request, or one loop); otherwise the latency
// stands in.
struct OpenRequest {
  uint64_t begin_ns, admitted_ns;
};
thread_local OpenRequest t_open{0, 0};

void request_opened(tandem_client_page* page, uint64_t now) noexcept {
  __atomic_fetch_add(&page->requests_open, 1, __ATOMIC_ACQ_REL);
  __atomic_store_n(&page->request_activity_ns, now, __ATOMIC_RELEASE);
}

// One request fewer open; never below zero (an end without a begin, or a request begun
// before the slot existed).
void decrement_open(tandem_client_page* page) noexcept {
  uint32_t open = __atomic_load_n(&page->requests_open, __ATOMIC_ACQUIRE);
  while (open > 0 && !__atomic_compare_exchange_n(&page->requests_open, &open, open - 1, false, __ATOMIC_ACQ_REL,
                                                  __ATOMIC_ACQUIRE)) {
  }
}

// `latency_ns` counts from the arrival (the SLO's measure); `service_ns` from the admission on
// (what a bubble must hold: the admission's estimate). Were the estimate the latency, queueing
// would feed it: a backlog makes requests look longer than any bubble, so each waits its whole
// SLO, which lengthens the backlog.
void request_closed(tandem_client_page* page, uint64_t now, uint64_t latency_ns, uint64_t service_ns) noexcept {
  decrement_open(page);
  // The daemon sees the count fall at its next tick and wakes the best-effort work held back
  // while the request ran (only it writes the segment the other processes wait on).
  __atomic_store_n(&page->request_activity_ns, now, __ATOMIC_RELEASE);
  uint64_t mean = __atomic_load_n(&page->request_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&page->request_ns, mean ? (mean * 7 + service_ns) / 8 : service_ns, __ATOMIC_RELEASE);
  // Requests ended on several threads at once share one width: the widest since the last end.
  uint32_t blocks = g_request_blocks.exchange(0, std::memory_order_relaxed);
  if (blocks) __atomic_store_n(&page->request_blocks, blocks, __ATOMIC_RELAXED);
  __atomic_fetch_add(&page->requests, 1, __ATOMIC_RELAXED);
  std::lock_guard<std::mutex> lock(g_samples_mutex);
  if (g_sample_count < kSamples) g_samples[g_sample_count] = latency_ns;
  if (g_sample_count < UINT32_MAX) ++g_sample_count;
  g_fresh = true;
}

// Nearest-rank percentile of v[0..n), n > 0 (reorders v).
uint64_t percentile(uint64_t* v, size_t n, long long pctl) noexcept {
  size_t rank = static_cast<size_t>((static_cast<unsigned long long>(pctl) * n + 99) / 100);
  size_t index = rank ? rank - 1 : 0;
  std::nth_element(v, v + index, v + n);
  return v[index];
}

}  // namespace

void request_launch() noexcept {
  if (g_explicit.load(std::memory_order_relaxed) || g_transparent_open.load(std::memory_order_relaxed) ||
      g_transparent_open.exchange(true))
    return;
  uint64_t arrival = monotonic_ns();
  const tandem_slot* slot = current_slot();
  const tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  tandem_client_page* page = current_page();
  if (!slot || !shm || !page) {  // not linked: timed, not announced
    g_transparent_start.store(arrival, std::memory_order_relaxed);
    return;
  }
  admit_request(page, shm, arrival);
  uint64_t start = monotonic_ns();  // the request's time starts when it may run
  g_transparent_start.store(start, std::memory_order_relaxed);
  request_opened(page, start);
}

void request_synchronized() noexcept {
  if (g_explicit.load(std::memory_order_relaxed) || !g_transparent_open.exchange(false)) return;
  if (!current_slot()) return;
  uint64_t now = monotonic_ns();
  uint64_t took = now - g_transparent_start.load(std::memory_order_relaxed);  // from its admission
  request_closed(current_page(), now, took, took);
}

uint64_t explicit_request_begin(uint64_t arrival_ns) noexcept {
  // Only online inference has requests: for any other role the calls are accepted and ignored
  // (a batch job that reports them must not wait for bubbles as an online one does).
  if (g_role != TANDEM_ROLE_INFERENCE) return arrival_ns ? arrival_ns : monotonic_ns();
  // Explicit from now on: a transparent request still open ends here, and what was measured
  // transparently (a warm-up, model loading) does not count.
  if (!g_explicit.exchange(true)) {
    if (g_transparent_open.exchange(false))
      if (current_slot()) decrement_open(current_page());
    std::lock_guard<std::mutex> lock(g_samples_mutex);
    g_sample_count = 0;
    g_fresh = true;  // publishes "nothing measured" over what may have been published
  }
  uint64_t now = monotonic_ns();
  uint64_t begin = arrival_ns && arrival_ns <= now ? arrival_ns : now;
  const tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  tandem_client_page* page = current_page();
  if (current_slot() && shm && page) {
    admit_request(page, shm, begin);
    uint64_t admitted = monotonic_ns();
    request_opened(page, admitted);
    t_open = {begin, admitted};
  }
  return begin;
}

void explicit_request_end(uint64_t begin_ns) noexcept {
  if (g_role != TANDEM_ROLE_INFERENCE) return;
  uint64_t now = monotonic_ns();
  if (!current_slot() || !begin_ns || begin_ns > now) return;
  bool ours = t_open.begin_ns == begin_ns && t_open.admitted_ns && t_open.admitted_ns <= now;
  request_closed(current_page(), now, now - begin_ns, ours ? now - t_open.admitted_ns : now - begin_ns);
  if (ours) t_open = {0, 0};
}

void publish_request_latency() noexcept {
  const tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  tandem_client_page* page = current_page();
  if (!current_slot() || !shm || !page) return;
  __atomic_store_n(&page->slo_us, static_cast<uint32_t>(setting_ns(SettingId::TANDEM_SLO_MS) / kNsPerUs),
                   __ATOMIC_RELAXED);
  static uint64_t sorted[kSamples];  // the progress thread's alone
  size_t n = 0;
  uint32_t count = 0, interval = 0;
  {
    std::lock_guard<std::mutex> lock(g_samples_mutex);
    uint32_t seq = __atomic_load_n(&shm->control_seq, __ATOMIC_ACQUIRE);
    if (seq != g_interval) {  // a new control interval: measure it afresh
      g_interval = seq;
      g_sample_count = 0;
      g_fresh = false;
      return;
    }
    if (!g_fresh) return;
    g_fresh = false;
    count = g_sample_count;
    interval = g_interval;
    n = std::min<size_t>(count, kSamples);
    std::copy(g_samples, g_samples + n, sorted);
  }
  long long pctl = std::clamp<long long>(setting_int(SettingId::TANDEM_SLO_PCTL), 1, 100);
  __atomic_store_n(&page->latency_ns, n ? percentile(sorted, n, pctl) : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&page->latency_samples, count, __ATOMIC_RELAXED);
  __atomic_store_n(&page->latency_seq, interval, __ATOMIC_RELEASE);
}

std::mutex& request_samples_mutex_for_test() noexcept { return g_samples_mutex; }

void online_requests_after_fork_child() noexcept {
  new (&g_samples_mutex) std::mutex();
  g_sample_count = 0;
  g_interval = 0;
  g_fresh = false;
  g_explicit.store(false);
  g_transparent_open.store(false);
  g_request_blocks.store(0);
  t_open = {0, 0};  // the forking thread's, the only one in the child
}

// ---- the synchronization hooks ----
namespace {
inline CUresult synchronized(CUresult r) noexcept {
  if (g_role == TANDEM_ROLE_INFERENCE) request_synchronized();
  return r;
}
}  // namespace

// A training stream whose work went to a green stream is synchronized there (green_streams.h).
CUresult hook_cuStreamSynchronize(CUstream s) noexcept {
  return synchronized(g_real.cuStreamSynchronize(green_op_stream(s, false)));
}
CUresult hook_cuStreamSynchronize_ptsz(CUstream s) noexcept {
  return synchronized(g_real.cuStreamSynchronize_ptsz(green_op_stream(s, true)));
}
CUresult hook_cuCtxSynchronize() noexcept { return synchronized(g_real.cuCtxSynchronize()); }
CUresult hook_cuCtxSynchronize_v2(CUcontext ctx) noexcept { return synchronized(g_real.cuCtxSynchronize_v2(ctx)); }
CUresult hook_cuEventSynchronize(CUevent e) noexcept { return synchronized(g_real.cuEventSynchronize(e)); }

}  // namespace tandem::hook
