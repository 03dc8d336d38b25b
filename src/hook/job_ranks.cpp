#include "job_ranks.h"

#include <stdlib.h>

#include "counters.h"
#include "futex.h"
#include "log.h"
#include "progress.h"
#include "settings.h"

namespace tandem::hook {

std::atomic<uint64_t> g_collectives_launched{0};
bool g_job_grouped = false;

namespace {
JobIdentity g_job;

// A positive integer environment variable (torchrun's), 0 when absent or not a number.
uint32_t env_count(const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  unsigned long n = strtoul(v, &end, 10);
  return *end || n > 4096 ? 0 : static_cast<uint32_t>(n);
}
}  // namespace

const JobIdentity& job_identity() noexcept { return g_job; }

void read_job_identity() noexcept {
  if (g_role != TANDEM_ROLE_TRAINING || !setting_bool(SettingId::TANDEM_JOB_LOCAL)) return;
  uint32_t world = env_count("WORLD_SIZE");
  if (world <= 1) return;  // every rank in this process: its collectives are gated like compute
  uint32_t local = env_count("LOCAL_WORLD_SIZE");
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (local != world || !addr || !*addr || !port || !*port) {
    TANDEM_LOG_WARN("TANDEM_JOB_LOCAL=1 but WORLD_SIZE={} LOCAL_WORLD_SIZE={}{}: collectives are not held "
                    "(a rank on another node would wait for those held here)",
                    world, local, addr && *addr && port && *port ? "" : " without MASTER_ADDR/MASTER_PORT");
    return;
  }
  try {
    g_job.key = std::string(addr) + ":" + port;
    if (const char* run = getenv("TORCHELASTIC_RUN_ID"); run && *run) g_job.key += std::string("/") + run;
    if (g_job.key.size() > 200) g_job.key.resize(200);
  } catch (...) {
    return;
  }
  g_job.ranks = world;
  g_job_grouped = true;
  TANDEM_LOG_INFO("rank of job {} ({} local ranks): its collectives are held with its peers'", g_job.key, world);
}

void collective_wait(const tandem_slot* slot, tandem_client_page* page, uint64_t n) noexcept {
  const uint64_t period_ns = setting_ns(SettingId::TANDEM_SAMPLE_US);
  const uint64_t stale_ns = setting_ns(SettingId::TANDEM_FAIL_OPEN_MS);
  const tandem_shm_header* shm = g_shm.load(std::memory_order_acquire);
  uint64_t start = monotonic_ns();
  __atomic_store_n(&page->collective_waiting, static_cast<uint32_t>(n), __ATOMIC_RELAXED);
  for (;;) {
    uint32_t wake = __atomic_load_n(&slot->wake, __ATOMIC_ACQUIRE);
    uint64_t allowed = __atomic_load_n(&slot->collectives_allowed, __ATOMIC_ACQUIRE);
    if (!allowed || n < allowed) break;
    if (!shm || monotonic_ns() > __atomic_load_n(&shm->daemon_heartbeat_ns, __ATOMIC_ACQUIRE) + stale_ns) {
      count(gate_counters().fail_open);  // the daemon is gone or hung: let the collective run
      break;
    }
    futex_wait(&slot->wake, wake, 4 * period_ns);  // tandemd wakes it when it raises the limit
  }
  __atomic_store_n(&page->collective_waiting, 0u, __ATOMIC_RELAXED);
  count(gate_counters().collective_holds);
  count(gate_counters().collective_hold_ns, monotonic_ns() - start);
}

}  // namespace tandem::hook
