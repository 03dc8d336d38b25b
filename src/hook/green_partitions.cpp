// The green contexts of a training process's live partitions (green_streams.h): made once, on
// the progress thread with the application's context current, as cuda.h's four steps say (the
// device's SM resource, one group split off it, its descriptor, a green context with its
// default stream), one per level of TANDEM_LIVE_LEVELS (shm_abi.h: 25, 50, 70 and 85% of the
// SMs, rounded down) that the GPU's granularity can tell apart. The page's training_flags say
// which are ready, so tandemd chooses among what exists.
#include <mutex>

#include "green_partitions.h"
#include "green_streams.h"
#include "log.h"
#include "real_driver.h"

namespace tandem::hook {

GreenState g_green;

namespace {

// Percentages of the GPU's SMs training may keep while a request runs: a quarter to most of
// them, finer where inference's share usually settles.
constexpr unsigned kLevels[TANDEM_LIVE_PARTITIONS] = TANDEM_LIVE_LEVELS;

Partition g_partitions[TANDEM_LIVE_PARTITIONS];
int g_count = 0;           // prepared (written before g_green's ready bit)
bool g_mps = false;        // the context is an MPS client
bool g_attempted = false;  // the progress thread's alone

// Why not, said once.
bool refuse(const char* why, CUresult r = CUDA_SUCCESS) noexcept {
  if (r != CUDA_SUCCESS) TANDEM_LOG_INFO("live SM partitions unavailable: {} (CUresult {})", why, static_cast<int>(r));
  else TANDEM_LOG_INFO("live SM partitions unavailable: {}", why);
  return false;
}

// Memory is shared only with the primary context: a green context's converted context is the
// primary context with fewer SMs, so launches of another context's pointers cannot move there.
bool primary_context_current(CUdevice dev) noexcept {
  CUcontext current = nullptr, primary = nullptr;
  if (g_real.cuCtxGetCurrent(&current) != CUDA_SUCCESS || !current) return false;
  if (g_real.cuDevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS) return false;
  g_real.cuDevicePrimaryCtxRelease_v2(dev);
  return primary == current;
}

bool prepare(CUdevice dev) noexcept {
  int device_sms = 0, mps = 0;
  if (g_real.cuDeviceGetAttribute(&device_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
      device_sms <= 0)
    return refuse("the GPU's SM count is unknown");
  g_mps = g_real.cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev) == CUDA_SUCCESS && mps;
  if (!primary_context_current(dev)) return refuse("the application's context is not the device's primary context");
  // An MPS client limited below 100% (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, TANDEM_SLO_TRAINING_SMS,
  // an execution affinity): the driver gives green contexts the client's SMs, not theirs.
  CUexecAffinityParam affinity{};
  if (g_real.cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS &&
      affinity.param.smCount.val < static_cast<unsigned>(device_sms))
    return refuse("this MPS client is limited to part of the SMs (its active thread percentage is below 100)");
  CUdevResource whole{};
  if (CUresult r = g_real.cuDeviceGetDevResource(dev, &whole, CU_DEV_RESOURCE_TYPE_SM); r != CUDA_SUCCESS)
    return refuse("the driver has no green contexts (CUDA 12.4 or later)", r);
  unsigned step = whole.sm.smCoscheduledAlignment ? whole.sm.smCoscheduledAlignment : 1;
  unsigned minimum = whole.sm.minSmPartitionSize;
  unsigned previous = 0;
  for (unsigned level = 0; level < TANDEM_LIVE_PARTITIONS; ++level) {
    unsigned pct = kLevels[level];
    unsigned sms = whole.sm.smCount * pct / 100 / step * step;
    if (sms < minimum) sms = minimum;
    if (sms <= previous || sms >= whole.sm.smCount) continue;  // the granularity cannot tell it from its neighbour
    CUdevResource group{}, rest{};
    unsigned groups = 1;
    CUdevResourceDesc desc = nullptr;
    CUgreenCtx ctx = nullptr;
    CUresult r = g_real.cuDevSmResourceSplitByCount(&group, &groups, &whole, &rest, 0, sms);
    if (r == CUDA_SUCCESS && groups != 1) r = CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    if (r == CUDA_SUCCESS) r = g_real.cuDevResourceGenerateDesc(&desc, &group, 1);
    if (r == CUDA_SUCCESS) r = g_real.cuGreenCtxCreate(&ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS) {
      refuse("the driver refused a green context", r);
      break;  // keep those made
    }
    g_partitions[g_count++] = {static_cast<uint8_t>(pct), level, group.sm.smCount, ctx};
    previous = group.sm.smCount;
  }
  if (g_count == 0) return false;
  TANDEM_LOG_INFO("live SM partitions ready: {} green contexts, {}..{} of {} SMs", g_count, g_partitions[0].sms,
                  g_partitions[g_count - 1].sms, whole.sm.smCount);
  return true;
}

}  // namespace

void prepare_green_partitions() noexcept {
  if (g_role != TANDEM_ROLE_TRAINING || g_attempted) return;
  g_attempted = true;
  CUdevice dev = 0;
  if (g_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return;
  if (prepare(dev)) g_green.word.fetch_or(GreenState::kReady, std::memory_order_release);
}

uint32_t green_training_flags() noexcept {
  uint32_t flags = g_mps ? TANDEM_TRAINING_MPS : 0u;
  for (int i = 0; g_green.ready() && i < g_count; ++i) flags |= TANDEM_TRAINING_LIVE(g_partitions[i].level);
  return flags;
}

int green_partition_for(uint32_t pct) noexcept {
  int best = -1;
  for (int i = 0; i < g_count; ++i)
    if (g_partitions[i].pct <= pct) best = i;  // ascending: the largest not above what tandemd allows
  return best;
}

const Partition& green_partition(int index) noexcept { return g_partitions[index]; }

int green_partition_count() noexcept { return g_green.ready() ? g_count : 0; }

void green_partitions_after_fork_child() noexcept {
  // The parent's green contexts are not the child's: it prepares its own if it uses CUDA.
  g_green.word.store(0);
  g_count = 0;
  g_attempted = false;
}

}  // namespace tandem::hook
