#include "collective_waits.h"

#include <algorithm>
#include <mutex>

#include "progress.h"

namespace tandem::hook {

std::atomic<uint64_t> collective_detail::g_waited_ordinal{0};
using collective_detail::g_waited_ordinal;

namespace {

std::atomic<uint64_t> g_issued{0};
std::atomic<uint64_t> g_over{0};

// Events recorded behind a collective, the last few (DDP waits for each bucket's all-reduce
// right after the backward pass). Written under g_write; read without a lock: a reader that
// races a writer may pair an event with a neighbour's ordinal, which at worst counts some
// queued work as running (as without this file) or a collective's tail as a bubble.
constexpr unsigned kEvents = 16;
struct TaggedEvent {
  std::atomic<CUevent> event{nullptr};
  std::atomic<uint64_t> ordinal{0};
};
TaggedEvent g_events[kEvents];
unsigned g_next_event = 0;  // under g_write
std::mutex g_write;         // event records after a collective and waits for one: rare

// The last stream made to wait for a collective (one: the stream a framework computes on).
std::atomic<CUstream> g_waiting_stream{nullptr};
std::atomic<bool> g_waiting_per_thread{false};
// Kernels launched behind it, not yet told to tandemd. Published together once the collective
// last waited for is over: a launch behind an older one that is over meanwhile waits with them.
std::atomic<uint64_t> g_queued_launches{0};

}  // namespace

void note_collective_issued() noexcept { g_issued.fetch_add(1, std::memory_order_relaxed); }

uint64_t collectives_issued() noexcept { return g_issued.load(std::memory_order_relaxed); }

bool note_event_record(CUevent e, CUstream s, bool per_thread) noexcept {
  uint64_t ordinal = g_issued.load(std::memory_order_relaxed);
  if (!e || !ordinal) return false;  // no collective yet
  if (s != g_notes.nccl_stream.load(std::memory_order_relaxed) ||
      per_thread != g_notes.nccl_per_thread.load(std::memory_order_relaxed))
    return false;
  std::lock_guard<std::mutex> lock(g_write);
  TaggedEvent& t = g_events[g_next_event++ % kEvents];
  t.event.store(nullptr, std::memory_order_relaxed);
  t.ordinal.store(ordinal, std::memory_order_relaxed);
  t.event.store(e, std::memory_order_release);
  return true;
}

void note_stream_wait(CUstream s, CUevent e, bool per_thread) noexcept {
  if (!e || !g_issued.load(std::memory_order_relaxed)) return;
  uint64_t ordinal = 0;  // the event's last record (an event is recorded again every step)
  for (TaggedEvent& t : g_events)
    if (t.event.load(std::memory_order_acquire) == e) ordinal = std::max(ordinal, t.ordinal.load(std::memory_order_relaxed));
  if (ordinal <= g_over.load(std::memory_order_acquire)) return;  // none, or over already: nothing waits
  std::lock_guard<std::mutex> lock(g_write);
  g_waited_ordinal.store(0, std::memory_order_relaxed);
  g_waiting_stream.store(s, std::memory_order_relaxed);
  g_waiting_per_thread.store(per_thread, std::memory_order_relaxed);
  g_waited_ordinal.store(ordinal, std::memory_order_release);
}

uint64_t collective_ahead_of_slow(CUstream s, bool per_thread) noexcept {
  uint64_t ordinal = g_waited_ordinal.load(std::memory_order_acquire);
  if (!ordinal || ordinal <= g_over.load(std::memory_order_acquire)) return 0;
  if (g_waiting_stream.load(std::memory_order_relaxed) != s ||
      g_waiting_per_thread.load(std::memory_order_relaxed) != per_thread)
    return 0;
  return g_waited_ordinal.load(std::memory_order_acquire) == ordinal ? ordinal : 0;  // not rewritten meanwhile
}

void note_queued_launches(uint64_t kernels) noexcept { g_queued_launches.fetch_add(kernels, std::memory_order_relaxed); }

uint64_t take_launches_no_longer_queued() noexcept {
  if (!g_queued_launches.load(std::memory_order_relaxed)) return 0;
  if (g_waited_ordinal.load(std::memory_order_acquire) > g_over.load(std::memory_order_acquire)) return 0;
  return g_queued_launches.exchange(0, std::memory_order_relaxed);
}

void collectives_over_through(uint64_t ordinal) noexcept {
  uint64_t over = g_over.load(std::memory_order_relaxed);
  while (ordinal > over && !g_over.compare_exchange_weak(over, ordinal, std::memory_order_release)) {
  }
}

uint64_t collectives_over() noexcept { return g_over.load(std::memory_order_acquire); }

void collective_waits_after_fork_child() noexcept {
  new (&g_write) std::mutex();
  for (TaggedEvent& t : g_events) t.event.store(nullptr, std::memory_order_relaxed);
  g_next_event = 0;
  g_issued.store(0, std::memory_order_relaxed);
  g_over.store(0, std::memory_order_relaxed);
  g_waited_ordinal.store(0, std::memory_order_relaxed);
  g_queued_launches.store(0, std::memory_order_relaxed);
}

}  // namespace tandem::hook
