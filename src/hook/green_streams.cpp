// The switching of green_streams.h: a table of the application streams that launched while a
// partition was wanted (at most kMaxStreams; more are left on their own streams, counted), each
// with its current stream and its green streams, all under one mutex.
#include "green_streams.h"

#include <pthread.h>

#include <mutex>
#include <new>

#include "capture_state.h"
#include "green_partitions.h"
#include "log.h"
#include "progress.h"
#include "real_driver.h"
#include "stream_registry.h"

namespace tandem::hook {

namespace {

constexpr int kMaxStreams = 256;
constexpr int kHome = -1;

enum class Kind : uint8_t { legacy, blocking, per_thread, nonblocking, application_green };

// A stream work is issued to, and how much of the other side of the legacy stream's implicit
// synchronization it has waited for (counts of operations, see follow_implicit_sync).
struct Target {
  CUstream stream = nullptr;
  uint64_t seen_legacy = 0, seen_blocking = 0;
};
constexpr uint64_t kNotSeen = UINT64_MAX;  // a count never reached: the next operation waits

struct AppStream {
  CUstream handle = nullptr;  // as tandem names it: CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, or the handle
  Kind kind = Kind::nonblocking;
  int priority = 0;
  int current = kHome;        // kHome, or the partition whose green stream holds its work
  Target home;
  Target green[TANDEM_LIVE_PARTITIONS];
  bool dead = false;          // a per-thread default stream whose thread exited
};

std::mutex g_mutex;
AppStream* g_table[kMaxStreams];  // g_count entries, any order
int g_count = 0;
AppStream g_legacy_entry;         // the legacy stream's, never removed
bool g_legacy_known = false;
CUevent g_event = nullptr;        // recorded and waited on at once: one serves every switch
uint64_t g_legacy_ops = 0, g_blocking_ops = 0;  // operations issued (while engaged) by each side
int g_dead = 0;
bool g_full_logged = false;

std::atomic<uint64_t> g_redirected{0}, g_switches{0}, g_switch_ns{0}, g_created{0}, g_destroyed{0}, g_untracked{0};

// Per-thread default streams: each thread's entry; its destructor marks it dead at thread exit
// (reaped under the lock later: no driver call from a thread's teardown).
struct PerThreadEntry {
  AppStream* entry = nullptr;
  ~PerThreadEntry() {
    if (!entry) return;
    std::lock_guard<std::mutex> lock(g_mutex);
    entry->dead = true;
    ++g_dead;
  }
};
thread_local PerThreadEntry t_per_thread;

bool is_legacy(CUstream s, bool per_thread) noexcept { return s == CU_STREAM_LEGACY || (!s && !per_thread); }

// The handle that names `s` whatever entry point tandem's own calls go through.
CUstream named(CUstream s, bool per_thread) noexcept {
  return is_legacy(s, per_thread) ? CU_STREAM_LEGACY : thread_own_stream(s, per_thread) ? CU_STREAM_PER_THREAD : s;
}

// An untracked stream (never redirected) at home: only the legacy stream's implicit
// synchronization may need an event, and only while some stream's work is away.
void follow_untracked(CUstream s, bool per_thread) noexcept;

// Makes `to` run after everything queued on `from` so far (with the lock held).
bool order_after(CUstream to, CUstream from) noexcept {
  if (!g_event && g_real.cuEventCreate(&g_event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return false;
  uint64_t start = monotonic_ns();
  if (g_real.cuEventRecord(g_event, from) != CUDA_SUCCESS || g_real.cuStreamWaitEvent(to, g_event, 0) != CUDA_SUCCESS)
    return false;
  g_switch_ns.fetch_add(monotonic_ns() - start, std::memory_order_relaxed);  // the host time a switch costs
  g_switches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// The stream an entry's work is on now.
Target& current_target(AppStream& e) noexcept { return e.current == kHome ? e.home : e.green[e.current]; }

AppStream* find(CUstream s, bool per_thread) noexcept {
  if (is_legacy(s, per_thread)) return g_legacy_known ? &g_legacy_entry : nullptr;
  if (thread_own_stream(s, per_thread)) return t_per_thread.entry;
  for (int i = 0; i < g_count; ++i)
    if (g_table[i]->handle == s) return g_table[i];
  return nullptr;
}

// What kind of stream `s` is, from the driver (a new entry, off the fast path).
Kind kind_of(CUstream s, bool per_thread) noexcept {
  if (is_legacy(s, per_thread)) return Kind::legacy;
  if (thread_own_stream(s, per_thread)) return Kind::per_thread;
  CUgreenCtx own = nullptr;
  if (g_real.cuStreamGetGreenCtx(s, &own) == CUDA_SUCCESS && own) return Kind::application_green;
  unsigned flags = 0;
  g_real.cuStreamGetFlags(s, &flags);
  return flags & CU_STREAM_NON_BLOCKING ? Kind::nonblocking : Kind::blocking;
}

AppStream* create(CUstream s, bool per_thread) noexcept {
  Kind kind = kind_of(s, per_thread);
  AppStream* e = nullptr;
  if (kind == Kind::legacy) {
    e = &g_legacy_entry;
    g_legacy_known = true;
  } else if (g_count < kMaxStreams) {
    e = new (std::nothrow) AppStream();
  }
  if (!e) {
    g_untracked.fetch_add(1, std::memory_order_relaxed);
    if (!g_full_logged) TANDEM_LOG_INFO("live SM partitions: more than {} streams, the others stay on all SMs", kMaxStreams);
    g_full_logged = true;
    return nullptr;
  }
  e->kind = kind;
  e->handle = kind == Kind::legacy ? CU_STREAM_LEGACY : kind == Kind::per_thread ? CU_STREAM_PER_THREAD : s;
  e->home.stream = e->handle;
  e->home.seen_legacy = g_legacy_ops, e->home.seen_blocking = g_blocking_ops;  // it is where the hardware keeps it
  if (kind != Kind::legacy && kind != Kind::per_thread) g_real.cuStreamGetPriority(s, &e->priority);
  if (kind != Kind::legacy) g_table[g_count++] = e;
  if (kind == Kind::per_thread) t_per_thread.entry = e;
  return e;
}

void destroy_green_streams(AppStream& e) noexcept {
  for (Target& t : e.green) {
    if (!t.stream) continue;
    // The progress thread must not record a marker on it any more.
    CUstream expected = t.stream;
    g_notes.last_stream.compare_exchange_strong(expected, nullptr);
    expected = t.stream;
    g_notes.nccl_stream.compare_exchange_strong(expected, nullptr);
    note_stream_destroyed(t.stream);
    g_real.cuStreamDestroy_v2(t.stream);  // its queued work still runs
    g_destroyed.fetch_add(1, std::memory_order_relaxed);
    t = Target{};
  }
}

void remove(AppStream* e) noexcept {
  if (e->current != kHome) g_green.word.fetch_sub(GreenState::kAway, std::memory_order_relaxed);
  destroy_green_streams(*e);
  if (e == &g_legacy_entry) {
    *e = AppStream{};
    g_legacy_known = false;
    return;
  }
  for (int i = 0; i < g_count; ++i)
    if (g_table[i] == e) {
      g_table[i] = g_table[--g_count];
      break;
    }
  delete e;
}

// Moves `e`'s work to partition `to` (kHome: its own stream). False when the driver refused,
// the work staying where it was.
bool switch_to(AppStream& e, int to) noexcept {
  if (to == e.current) return true;
  Target& from = current_target(e);
  if (to != kHome && !e.green[to].stream) {
    CUstream created = nullptr;
    if (g_real.cuGreenCtxStreamCreate(&created, green_partition(to).ctx, CU_STREAM_NON_BLOCKING, e.priority) !=
        CUDA_SUCCESS)
      return false;
    note_stream_created(created, CU_STREAM_NON_BLOCKING);  // the memory pool's markers must cover it
    g_created.fetch_add(1, std::memory_order_relaxed);
    e.green[to].stream = created;
  }
  Target& target = to == kHome ? e.home : e.green[to];
  if (!order_after(target.stream, from.stream)) return false;
  // From home, what the stream has waited for is not known: while nothing is away the fast
  // path counts no operation, so the legacy and blocking streams may have queued work since its
  // counters were set (a blocking stream's first green kernel then ran before the legacy
  // stream's earlier copy: 1 run of 28 of e2e_green_order). Waiting once more is always safe.
  if (e.current == kHome) target.seen_legacy = target.seen_blocking = kNotSeen;
  else target.seen_legacy = from.seen_legacy, target.seen_blocking = from.seen_blocking;
  if (e.current == kHome) g_green.word.fetch_add(GreenState::kAway, std::memory_order_relaxed);
  if (to == kHome) g_green.word.fetch_sub(GreenState::kAway, std::memory_order_relaxed);
  e.current = to;
  return true;
}

// The legacy stream's implicit synchronization, for an operation of stream `kind` about to be
// issued to `to` (the entry's target; `at_home`: the stream itself, where the hardware does
// part of it; `seen`: what `to` has waited for, null when untracked: always wait). The legacy
// stream waits for every blocking stream's earlier work, a blocking (or per-thread) stream for
// the legacy stream's: what of it went to green streams is waited for here, and when `to` is a
// green stream, also what stayed on the streams themselves (an event on the legacy stream
// covers both: recording it waits for the blocking streams).
void follow_implicit_sync(Kind kind, CUstream to, bool at_home, Target* seen) noexcept {
  if (kind == Kind::blocking || kind == Kind::per_thread) {
    ++g_blocking_ops;
    if (seen && seen->seen_legacy == g_legacy_ops) return;
    if (g_legacy_known && g_legacy_entry.current != kHome) order_after(to, current_target(g_legacy_entry).stream);
    else if (!at_home) order_after(to, CU_STREAM_LEGACY);
    if (seen) seen->seen_legacy = g_legacy_ops;
  } else if (kind == Kind::legacy) {
    ++g_legacy_ops;
    if (seen && seen->seen_blocking == g_blocking_ops) return;
    for (int i = 0; i < g_count; ++i) {
      AppStream& b = *g_table[i];
      if ((b.kind == Kind::blocking || b.kind == Kind::per_thread) && b.current != kHome)
        order_after(to, current_target(b).stream);
    }
    if (!at_home) order_after(to, CU_STREAM_LEGACY);
    if (seen) seen->seen_blocking = g_blocking_ops;
  }
}

// Per-thread default streams of exited threads: their green streams go (after the legacy
// stream has been made to wait for their work, as it would have for the thread's stream).
void reap_dead() noexcept {
  for (int i = 0; i < g_count && g_dead > 0;) {
    AppStream* e = g_table[i];
    if (!e->dead) {
      ++i;
      continue;
    }
    if (e->current != kHome) {
      Target& l = g_legacy_known ? current_target(g_legacy_entry) : g_legacy_entry.home;
      order_after(l.stream ? l.stream : CU_STREAM_LEGACY, current_target(*e).stream);
    }
    --g_dead;
    remove(e);  // swaps the last entry into i
  }
}

void follow_untracked(CUstream s, bool per_thread) noexcept {
  if (g_green.away() == 0) return;
  Kind kind = is_legacy(s, per_thread) ? Kind::legacy : thread_own_stream(s, per_thread) ? Kind::per_thread
                                                                                     : kind_of(s, per_thread);
  follow_implicit_sync(kind, named(s, per_thread), true, nullptr);
}

// The partition tandemd wants now (kHome: none): the largest prepared within the slot's
// live_partition, none while a capture is open.
int wanted_partition() noexcept {
  if (g_open_captures.load(std::memory_order_relaxed) > 0) return kHome;
  const tandem_slot* slot = current_slot();
  uint32_t pct = slot ? __atomic_load_n(&slot->live_partition, __ATOMIC_ACQUIRE) : 0;
  if (!pct || !g_green.ready()) return kHome;
  int p = green_partition_for(pct);
  return p < 0 ? kHome : p;
}

// Switches `e` home; when the driver refuses the event pair, waits for its work instead.
void go_home(AppStream& e) noexcept {
  if (switch_to(e, kHome)) return;
  g_real.cuStreamSynchronize(current_target(e).stream);
  g_green.word.fetch_sub(GreenState::kAway, std::memory_order_relaxed);
  e.current = kHome;
}

// No partition wanted: every stream this thread can name goes home now, so that the fast path
// resumes (another thread's per-thread default stream goes home at its own next call).
void bring_all_home() noexcept {
  if (g_green.away() == 0) return;
  if (g_legacy_known && g_legacy_entry.current != kHome) go_home(g_legacy_entry);
  for (int i = 0; i < g_count; ++i) {
    AppStream& e = *g_table[i];
    if (e.current != kHome && (e.kind != Kind::per_thread || t_per_thread.entry == &e)) go_home(e);
  }
}

// The common path of every call while engaged. `may_switch`: a compute launch, which takes its
// stream to the partition wanted; any call takes every stream home when none is. Returns the
// stream to issue on: `s` itself at home.
CUstream route(CUstream s, bool per_thread, bool may_switch) noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  RelaxedCaptureScope relaxed;
  if (g_dead) reap_dead();
  if (stream_is_capturing(s, per_thread)) return s;  // never inside a capture: its work is recorded, not run
  int want = wanted_partition();
  if (want == kHome) bring_all_home();
  AppStream* e = find(s, per_thread);
  if (!e && want != kHome) e = create(s, per_thread);
  if (!e) {  // untracked (the table is full, or nothing is wanted): at home
    follow_untracked(s, per_thread);
    return s;
  }
  if (e->kind == Kind::application_green) want = kHome;  // the application's own partition: left alone
  if (want == kHome) go_home(*e);
  else if (may_switch) switch_to(*e, want);  // refused: the work stays where it is, in order
  Target& t = current_target(*e);
  follow_implicit_sync(e->kind, t.stream, e->current == kHome, &t);
  if (e->current == kHome) return s;
  if (may_switch) g_redirected.fetch_add(1, std::memory_order_relaxed);
  return t.stream;
}

}  // namespace

CUstream green_launch_stream_slow(CUstream s, bool per_thread, bool compute) noexcept {
  return route(s, per_thread, compute);
}

CUstream green_op_stream_slow(CUstream s, bool per_thread) noexcept { return route(s, per_thread, false); }

void green_home_slow(CUstream s, bool per_thread) noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  RelaxedCaptureScope relaxed;
  if (stream_is_capturing(s, per_thread)) return;
  if (wanted_partition() == kHome) bring_all_home();
  AppStream* e = find(s, per_thread);
  if (!e) return follow_untracked(s, per_thread);
  go_home(*e);
  follow_implicit_sync(e->kind, e->home.stream, true, &e->home);
}

void green_stream_destroyed(CUstream s) noexcept {
  if (g_role != TANDEM_ROLE_TRAINING || is_legacy(s, false) || thread_own_stream(s, false)) return;  // not destroyable
  std::lock_guard<std::mutex> lock(g_mutex);
  AppStream* e = find(s, false);
  if (!e) return;
  // A blocking stream's work must stay where the legacy stream's implicit wait finds it.
  if (e->kind == Kind::blocking && e->current != kHome) switch_to(*e, kHome);
  remove(e);
}

GreenStats green_stats() noexcept {
  GreenStats s;
  s.partitions = static_cast<uint64_t>(green_partition_count());
  s.redirected = g_redirected.load(std::memory_order_relaxed);
  s.switches = g_switches.load(std::memory_order_relaxed);
  s.switch_ns = g_switch_ns.load(std::memory_order_relaxed);
  s.streams = g_created.load(std::memory_order_relaxed);
  s.live_streams = s.streams - g_destroyed.load(std::memory_order_relaxed);
  s.untracked = g_untracked.load(std::memory_order_relaxed);
  return s;
}

void green_after_fork_child() noexcept {
  new (&g_mutex) std::mutex();  // only this thread exists in the child
  g_count = 0;                  // the parent's streams (and their entries, left allocated) are not the child's
  g_legacy_entry = AppStream{};
  g_legacy_known = false;
  g_event = nullptr;
  g_dead = 0;
  t_per_thread.entry = nullptr;
  green_partitions_after_fork_child();
}

}  // namespace tandem::hook
