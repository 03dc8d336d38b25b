#include "kernel_cost.h"

#include <algorithm>
#include <atomic>
#include <optional>

#include "capture_state.h"
#include "daemon_link.h"
#include "handle_map.h"
#include "real_driver.h"

namespace tandem::hook {

std::atomic<uint64_t> cost_detail::g_launches{0};

namespace {

using namespace cost_detail;

uint64_t pack(const LearnedCost& c) {
  return std::min(c.ns, kNsMask) | (uint64_t{std::min(c.samples, kMaxSamples)} << kNsBits) | (c.shared_only ? kSharedOnly : 0);
}
LearnedCost unpack(uint64_t v) {
  return {v & kNsMask, static_cast<uint32_t>((v >> kNsBits) & kMaxSamples), (v & kSharedOnly) != 0};
}
// Before any long kernel was timed: 1/8 ns a thread, what an element-wise kernel over a large
// tensor costs on an H100 (and on the simulated GPU: 2 us a wave of 132 blocks of 256).
constexpr uint64_t kInitialNsPerThreadQ10 = 128;
std::atomic<uint64_t> g_ns_per_thread_q10{kInitialNsPerThreadQ10};

enum SampleState : uint32_t { kFree, kClaimed, kPending };
struct Sample {
  std::atomic<uint32_t> state{kFree};
  CUevent start = nullptr, end = nullptr;  // created by the first claimer, kept
  uintptr_t key = 0;
  uint64_t threads = 0;
  // What tandemd said of the other clients when the launch was made: the slot it said it in
  // (nullptr: no daemon), its count of periods shared, and whether the last one was.
  const tandem_slot* slot = nullptr;
  uint32_t busy_ticks = 0;
  bool busy = false;
};
constexpr uint32_t kSamples = 32;
Sample g_samples[kSamples];
std::atomic<uint32_t> g_next_slot{0};
std::atomic<uint64_t> g_samples_done{0};
std::atomic<uint64_t> g_samples_shared{0};
std::atomic<bool> g_polling{false};  // one poller at a time: the progress thread or a launch
std::atomic<uint64_t> g_shapes{0};

CUresult record(CUevent e, CUstream s, bool per_thread) {
  return per_thread ? g_real.cuEventRecord_ptsz(e, s) : g_real.cuEventRecord(e, s);
}

CUresult elapsed_ms(float* ms, CUevent start, CUevent end) {
  CUresult r = g_real.cuEventElapsedTime_v2(ms, start, end);
  return r == CUDA_ERROR_NOT_FOUND ? g_real.cuEventElapsedTime(ms, start, end) : r;
}

void learn(uintptr_t key, uint64_t threads, uint64_t measured, bool shared) {
  uint64_t old = kernel_costs().find(key);
  bool known = old != HandleMap::kAbsent;
  LearnedCost learned = next_learned_cost(known ? unpack(old) : LearnedCost{}, measured, shared);
  if (kernel_costs().put(key, pack(learned)) && !known) g_shapes.fetch_add(1, std::memory_order_relaxed);
  if (threads)
    g_ns_per_thread_q10.store(
        next_ns_per_thread_q10(g_ns_per_thread_q10.load(std::memory_order_relaxed), threads, measured, shared),
        std::memory_order_relaxed);
}

// Whether a timed launch shared the GPU with another client's work: the period it was made in
// was shared, or one has been since (a period that began after the kernel ended but before
// this look counts too: such a timing only loses its power to raise a cost). A slot that
// changed (tandemd restarted) says nothing: the timing counts as made alone, as without tandemd.
bool shared_gpu(const Sample& sm) {
  if (!sm.slot || sm.slot != current_slot()) return false;
  return sm.busy || __atomic_load_n(&sm.slot->others_busy_ticks, __ATOMIC_ACQUIRE) != sm.busy_ticks;
}

}  // namespace

uintptr_t graph_cost_key(const void* exec) noexcept {
  uintptr_t k = reinterpret_cast<uintptr_t>(exec) ^ 0xC2B2AE3D27D4EB4Full;  // apart from kernels
  return k ? k : 1;
}

uint64_t learned_cost_ns(uintptr_t key) noexcept {
  uint64_t v = kernel_costs().find(key);
  return v == HandleMap::kAbsent ? 0 : ns_of(v);
}

uint64_t kernel_cost_ns(uintptr_t key, uint64_t threads) noexcept {
  if (uint64_t learned = learned_cost_ns(key)) return learned;
  // A shape not learned yet may have a timed launch that just finished (a request's first
  // kernel, waited for by the host): look before guessing, so the next launch pays its length.
  poll_cost_samples();
  if (uint64_t learned = learned_cost_ns(key)) return learned;
  uint64_t guess = (threads * g_ns_per_thread_q10.load(std::memory_order_relaxed)) >> 10;
  return std::clamp(guess, kMinKernelCostNs, kMaxGuessNs);
}

ShapeCharge kernel_charge_learning(uintptr_t key, uint64_t threads, uint64_t n) noexcept {
  uint64_t ns = kernel_cost_ns(key, threads);  // may poll, and so teach the shape: look after it
  return {ns, timed_launch(kernel_costs().find(key), n)};
}

ShapeCharge graph_charge(uintptr_t key) noexcept {
  uint64_t n = next_launch_ordinal();
  uint64_t v = kernel_costs().find(key);
  return {v == HandleMap::kAbsent ? 0 : ns_of(v), timed_launch(v, n)};
}

int cost_sample_begin(uintptr_t key, uint64_t threads, CUstream s, bool per_thread, const tandem_slot* slot) noexcept {
  uint64_t n = next_launch_ordinal();
  if (!timed_launch(kernel_costs().find(key), n)) return -1;
  return cost_sample_claim(key, threads, s, per_thread, slot);
}

int cost_sample_claim(uintptr_t key, uint64_t threads, CUstream s, bool per_thread, const tandem_slot* slot) noexcept {
  // A few slots from a rotating start: a busy table skips this sample rather than wait.
  for (uint32_t tries = 0; tries < 4; ++tries) {
    uint32_t i = g_next_slot.fetch_add(1, std::memory_order_relaxed) % kSamples;
    Sample& sm = g_samples[i];
    uint32_t expected = kFree;
    if (!sm.state.compare_exchange_strong(expected, kClaimed, std::memory_order_acquire)) continue;
    if ((!sm.start && g_real.cuEventCreate(&sm.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ||
        (!sm.end && g_real.cuEventCreate(&sm.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ||
        record(sm.start, s, per_thread) != CUDA_SUCCESS) {
      sm.state.store(kFree, std::memory_order_release);
      return -1;
    }
    sm.key = key;
    sm.threads = threads;
    sm.slot = slot;
    sm.busy_ticks = slot ? __atomic_load_n(&slot->others_busy_ticks, __ATOMIC_ACQUIRE) : 0;
    sm.busy = slot && __atomic_load_n(&slot->others_busy, __ATOMIC_RELAXED);
    return static_cast<int>(i);
  }
  return -1;
}

void cost_sample_finish(int sample, CUstream s, bool per_thread, bool launched) noexcept {
  if (sample < 0) return;
  Sample& sm = g_samples[sample];
  bool pending = launched && record(sm.end, s, per_thread) == CUDA_SUCCESS;
  sm.state.store(pending ? kPending : kFree, std::memory_order_release);
}

void poll_cost_samples() noexcept {
  if (g_polling.exchange(true, std::memory_order_acquire)) return;  // another thread is at it
  std::optional<RelaxedCaptureScope> relaxed;  // the caller may be an application's thread
  for (Sample& sm : g_samples) {
    if (sm.state.load(std::memory_order_acquire) != kPending) continue;
    if (!relaxed) relaxed.emplace(true);
    CUresult q = g_real.cuEventQuery(sm.end);
    if (q == CUDA_ERROR_NOT_READY) continue;
    float ms = 0;
    if (q == CUDA_SUCCESS && elapsed_ms(&ms, sm.start, sm.end) == CUDA_SUCCESS && ms >= 0) {
      bool shared = shared_gpu(sm);
      learn(sm.key, sm.threads, static_cast<uint64_t>(static_cast<double>(ms) * 1e6), shared);
      g_samples_done.fetch_add(1, std::memory_order_relaxed);
      if (shared) g_samples_shared.fetch_add(1, std::memory_order_relaxed);
    }
    sm.state.store(kFree, std::memory_order_release);
  }
  g_polling.store(false, std::memory_order_release);
}

void cost_samples_after_fork_child() noexcept {
  // The parent's events belong to its context, which the child does not have.
  for (Sample& sm : g_samples) {
    sm.state.store(kFree);
    sm.start = sm.end = nullptr;
    sm.slot = nullptr;
  }
  g_polling.store(false);
}

LearnedCost next_learned_cost(LearnedCost learned, uint64_t measured_ns, bool shared) noexcept {
  measured_ns = std::max(measured_ns, uint64_t{1});
  uint32_t samples = std::min(learned.samples + 1, kMaxSamples);
  if (learned.samples == 0 || learned.ns == 0 || (learned.shared_only && !shared)) return {measured_ns, samples, shared};
  uint64_t ns = learned.ns;
  if (measured_ns < ns)
    ns = learned.shared_only ? measured_ns : ns - (ns - measured_ns) / 2;
  else if (!shared)
    ns += (measured_ns - ns) / 8;
  return {ns, samples, learned.shared_only};
}

uint64_t next_ns_per_thread_q10(uint64_t q10, uint64_t threads, uint64_t measured_ns, bool shared) noexcept {
  if (threads == 0 || measured_ns < kPerThreadMinNs) return q10;
  double observed = static_cast<double>(measured_ns) * 1024.0 / static_cast<double>(threads);
  double current = static_cast<double>(q10);
  if (shared && observed >= current) return q10;
  // Like a shape's cost: half way down, an eighth of the way up.
  double next = observed < current ? current + (observed - current) / 2 : current + (observed - current) / 8;
  return next < 1 ? 1 : static_cast<uint64_t>(next);
}

CostFigures cost_figures() noexcept {
  return {g_samples_done.load(), g_samples_shared.load(), g_shapes.load(), g_ns_per_thread_q10.load()};
}

}  // namespace tandem::hook
