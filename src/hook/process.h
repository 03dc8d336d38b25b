// Process life of the hook: lazy bootstrap on the first driver call, fork handling and
// the exit-time statistics. Nothing here runs at load time (no constructor work).
#pragma once
#include <atomic>

namespace tandem::hook {

enum class ProcessPhase : int {
  fresh = 0,         // nothing done yet: the first hooked call bootstraps
  booting = 1,       // one thread is bootstrapping
  ready = 2,         // hooks active (or passthrough when disabled)
  forked_child = 3,  // child of a bootstrapped parent that has not used CUDA itself yet
};

extern std::atomic<int> g_phase;
extern bool g_disabled;  // TANDEM_DISABLE=1, fixed at bootstrap

// Slow path of ensure_ready(): bootstraps, waits for a concurrent bootstrap, or revives a
// forked child. Returns false only while the calling thread is itself bootstrapping.
bool ensure_ready_slow() noexcept;

// The fast path: one acquire load.
inline bool ensure_ready() noexcept {
  if (__builtin_expect(g_phase.load(std::memory_order_acquire) ==
                           static_cast<int>(ProcessPhase::ready), 1))
    return true;
  return ensure_ready_slow();
}

// True when a hooked call must go straight to the real driver.
inline bool passthrough() noexcept { return !ensure_ready() || g_disabled; }

// True while this thread runs the bootstrap (re-entrant dlsym calls from the real driver).
bool bootstrapping_on_this_thread() noexcept;

// Writes the statistics file now (also registered with atexit at bootstrap). False when
// disabled, unused, unconfigured or the write failed.
bool write_stats_now() noexcept;

}  // namespace tandem::hook
