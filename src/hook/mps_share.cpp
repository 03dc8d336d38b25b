#include "mps_share.h"

#include <stdlib.h>

#include <cstdio>

#include "log.h"
#include "progress.h"
#include "real_driver.h"
#include "settings.h"

namespace tandem::hook {

namespace {
// Sets `name`=`value` for MPS, which reads it when the driver creates a context, after this
// first call; the bootstrap runs once, before any thread of ours exists. An operator's value
// stands (`setting`, the tandem setting that asked, is then ignored).
bool set_for_mps(const char* name, const char* value, const char* setting) noexcept {
  if (const char* set = getenv(name); set && *set) {
    TANDEM_LOG_INFO("{}={} already set: {} ignored", name, set, setting);
    return false;
  }
  return setenv(name, value, 1) == 0;
}
}  // namespace

int ask_mps_sm_share() noexcept {
  if (g_role != TANDEM_ROLE_TRAINING) return 0;
  long long pct = setting_int(SettingId::TANDEM_SLO_TRAINING_SMS);
  if (pct <= 0) return 0;
  if (pct > 100) pct = 100;
  char value[8];
  std::snprintf(value, sizeof value, "%lld", pct);
  if (!set_for_mps("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", value, "TANDEM_SLO_TRAINING_SMS")) return 0;
  TANDEM_LOG_INFO("training asks MPS for {}% of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)", pct);
  return static_cast<int>(pct);
}

bool ask_mps_priority() noexcept {
  if (g_role != TANDEM_ROLE_TRAINING && g_role != TANDEM_ROLE_BATCH_INFERENCE) return false;
  if (!setting_bool(SettingId::TANDEM_MPS_PRIORITY)) return false;
  if (!set_for_mps("CUDA_MPS_CLIENT_PRIORITY", "1", "TANDEM_MPS_PRIORITY")) return false;
  TANDEM_LOG_INFO("asks MPS for below-normal priority (CUDA_MPS_CLIENT_PRIORITY=1): online inference first");
  return true;
}

void publish_sm_share(tandem_client_page* page) noexcept {
  static int context_sms = -1, device_sms = 0;  // the progress thread's alone
  if (context_sms < 0) {
    CUexecAffinityParam a{};
    CUdevice dev = 0;
    context_sms = 0;
    if (g_real.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
        g_real.cuDeviceGetAttribute(&device_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS &&
        g_real.cuCtxGetExecAffinity(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS)
      context_sms = static_cast<int>(a.param.smCount.val);
  }
  __atomic_store_n(&page->sm_count, static_cast<uint32_t>(context_sms), __ATOMIC_RELAXED);
  __atomic_store_n(&page->device_sms, static_cast<uint32_t>(device_sms), __ATOMIC_RELAXED);
}

}  // namespace tandem::hook
