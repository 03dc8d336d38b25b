#include "process.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "counters.h"
#include "handle_map.h"
#include "memory_quota.h"
#include "mps_share.h"
#include "progress.h"
#include "daemon_link.h"
#include "gate.h"
#include "green_streams.h"
#include "job_ranks.h"
#include "log.h"
#include "online_requests.h"
#include "pool_backend.h"
#include "real_driver.h"
#include "settings.h"
#include "stats_writer.h"
#include "stream_registry.h"

extern char** environ;

namespace tandem::hook {

std::atomic<int> g_phase{static_cast<int>(ProcessPhase::fresh)};
bool g_disabled = false;

namespace {

std::atomic<pthread_t> g_booting_thread{};
// Set when this process (not a parent before fork) has used CUDA: only then are stats written.
std::atomic<bool> g_used_cuda{false};

void warn_setting(const char* message) noexcept { TANDEM_LOG_WARN("{}", message); }

void on_exit_write_stats() { (void)write_stats_now(); }

// Fork: no thread of the parent exists in the child. The child starts from zero counts, with
// fresh locks (a parent's thread may have held one: the exchange with tandemd, the pool's),
// without the parent's link and pool, and becomes a CUDA user of its own only if it calls the
// driver (phase forked_child). No lock of the hook is taken before the fork but the handle
// maps' (held for microseconds): a fork never waits for an exchange with tandemd.
void before_fork() noexcept { handle_maps_lock_all(); }
void after_fork_parent() noexcept { handle_maps_unlock_all(); }
void after_fork_child() noexcept {
  handle_maps_reset_locks_in_child();
  reset_counters();
  g_collectives_launched.store(0, std::memory_order_relaxed);
  memory_tracker_reset_in_child();
  memory_quota_after_fork_child();
  progress_after_fork_child();
  daemon_link_after_fork_child();
  pool_after_fork_child();
  stream_registry_after_fork_child();
  green_after_fork_child();
  online_requests_after_fork_child();
  g_used_cuda.store(false);
  g_phase.store(static_cast<int>(ProcessPhase::forked_child), std::memory_order_release);
}

// A setuid, setgid or file-capability program (the kernel's AT_SECURE) runs with its
// caller's environment, and /etc/ld.so.preload loads tandem into it as into any other: there
// TANDEM_REAL_LIBCUDA would make it load the caller's library with the program's privileges
// and TANDEM_STATS_FILE write the caller's path. Like the loader with LD_LIBRARY_PATH, tandem
// then ignores its settings: defaults only.
bool secure_execution() noexcept { return getauxval(AT_SECURE) != 0; }

void bootstrap() noexcept {
  bool secure = secure_execution();
  load_settings(secure ? nullptr : environ, warn_setting);
  set_log_level(static_cast<LogLevel>(setting_enum(SettingId::TANDEM_LOG)));
  if (secure) TANDEM_LOG_WARN("a setuid, setgid or privileged program: TANDEM_* settings are ignored, defaults apply");
  g_disabled = setting_bool(SettingId::TANDEM_DISABLE);
  char error[512];
  if (!resolve_real_driver(setting_text(SettingId::TANDEM_REAL_LIBCUDA), error, sizeof error)) {
    TANDEM_LOG_ERROR("{}; driver calls will fail (set TANDEM_REAL_LIBCUDA)", error);
  }
  if (g_disabled) {
    TANDEM_LOG_INFO("TANDEM_DISABLE=1: passthrough");
    return;
  }
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  atexit(on_exit_write_stats);
  g_role = role_code(setting_text(SettingId::TANDEM_ROLE));
  ask_mps_sm_share();  // before this first call reaches the driver
  ask_mps_priority();
  read_job_identity();
  g_job_local = g_role == TANDEM_ROLE_TRAINING && setting_bool(SettingId::TANDEM_JOB_LOCAL) && !g_job_grouped;
  start_progress_thread();  // registers with tandemd in the background: never blocks the caller
  TANDEM_LOG_INFO("bootstrapped (role {}, driver {})", setting_text(SettingId::TANDEM_ROLE),
                  setting_text(SettingId::TANDEM_REAL_LIBCUDA));
}

}  // namespace

bool bootstrapping_on_this_thread() noexcept {
  return g_phase.load(std::memory_order_acquire) == static_cast<int>(ProcessPhase::booting) &&
         pthread_equal(g_booting_thread.load(), pthread_self());
}

bool ensure_ready_slow() noexcept {
  for (;;) {
    int phase = g_phase.load(std::memory_order_acquire);
    if (phase == static_cast<int>(ProcessPhase::ready)) return true;
    if (phase == static_cast<int>(ProcessPhase::forked_child)) {
      g_used_cuda.store(true);
      start_progress_thread();  // the child registers on its own
      g_phase.store(static_cast<int>(ProcessPhase::ready), std::memory_order_release);
      return true;
    }
    if (phase == static_cast<int>(ProcessPhase::fresh)) {
      int expected = phase;
      if (g_phase.compare_exchange_strong(expected, static_cast<int>(ProcessPhase::booting))) {
        g_booting_thread.store(pthread_self());
        bootstrap();
        g_used_cuda.store(true);
        g_phase.store(static_cast<int>(ProcessPhase::ready), std::memory_order_release);
        return true;
      }
      continue;
    }
    // booting: the real driver's own initialisation may call back into us on this thread.
    if (pthread_equal(g_booting_thread.load(), pthread_self())) return false;
    sched_yield();  // another thread bootstraps; this takes microseconds
  }
}

bool write_stats_now() noexcept {
  if (g_disabled || !g_used_cuda.load()) return false;
  const char* path = setting_text(SettingId::TANDEM_STATS_FILE);
  if (!path[0]) return false;
  return write_stats_file(path, setting_text(SettingId::TANDEM_ROLE));
}

}  // namespace tandem::hook
