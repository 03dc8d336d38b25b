// NVML's memory queries seen through the quota (nvml_hooks.h). The wrappers are generated
// from nvml_api.def; each hook body asks the real NVML, then applies the same view of the
// quota as cuMemGetInfo (quota_memory_view). Without a quota, or with TANDEM_DISABLE=1, the
// real answer passes through untouched.
#include "nvml_hooks.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "memory_quota.h"
#include "nvml_abi.h"
#include "process.h"
#include "real_driver.h"

namespace tandem::hook {

namespace {

enum class NvmlEntry : int {
#define NVML_HOOK(symbol, params, args) symbol,
#include "nvml_api.def"
#undef NVML_HOOK
  count
};

constexpr const char* kNames[] = {
#define NVML_HOOK(symbol, params, args) #symbol,
#include "nvml_api.def"
#undef NVML_HOOK
};

// The real functions: learned by the dlsym route (dlopen'ed NVML), else found once with
// RTLD_NEXT (NVML linked to the program). Never by loading NVML ourselves.
std::atomic<void*> g_real_nvml[static_cast<int>(NvmlEntry::count)];

void* real_nvml(NvmlEntry e) noexcept {
  std::atomic<void*>& slot = g_real_nvml[static_cast<int>(e)];
  void* p = slot.load(std::memory_order_acquire);
  if (p) return p;
  if (DlsymFn lookup = real_dlsym()) p = lookup(RTLD_NEXT, kNames[static_cast<int>(e)]);
  if (p) slot.store(p, std::memory_order_release);
  return p;
}

// True when `fn` lives in NVML's library (libnvidia-ml.so*): another library's function of
// the same name is not NVML's and is left alone.
bool in_nvml_library(void* fn) noexcept {
  Dl_info info{};
  if (!dladdr(fn, &info) || !info.dli_fname) return false;
  const char* base = std::strrchr(info.dli_fname, '/');
  return std::strncmp(base ? base + 1 : info.dli_fname, "libnvidia-ml.so", 15) == 0;
}

}  // namespace

// ---- hook bodies: `real` is NVML's function, called first ----

nvmlReturn_t hook_nvmlDeviceGetMemoryInfo(nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_t*), nvmlDevice_t device,
                                          nvmlMemory_t* memory) noexcept {
  nvmlReturn_t r = real(device, memory);
  if (r != NVML_SUCCESS || !memory) return r;
  uint64_t free = memory->free, total = memory->total, used = memory->used;
  if (!quota_memory_view(free, total, used)) return r;
  *memory = nvmlMemory_t{total, free, used};
  return r;
}

// The driver's reserved memory is outside the quota: reserved is 0 in the quota's view.
nvmlReturn_t hook_nvmlDeviceGetMemoryInfo_v2(nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_v2_t*),
                                             nvmlDevice_t device, nvmlMemory_v2_t* memory) noexcept {
  nvmlReturn_t r = real(device, memory);
  if (r != NVML_SUCCESS || !memory) return r;
  uint64_t free = memory->free, total = memory->total, used = memory->used;
  if (!quota_memory_view(free, total, used)) return r;
  memory->total = total;
  memory->reserved = 0;
  memory->free = free;
  memory->used = used;
  return r;
}

bool is_hooked_nvml_symbol(const char* name) noexcept {
  if (!name || std::strncmp(name, "nvml", 4) != 0) return false;
  for (const char* n : kNames)
    if (std::strcmp(n, name) == 0) return true;
  return false;
}

}  // namespace tandem::hook

// ---- the exported wrappers and the dlsym route's table ----

#define TANDEM_EXPORT __attribute__((visibility("default")))
#define TANDEM_WITH_REAL(...) (real, __VA_ARGS__)

extern "C" {
#define NVML_HOOK(symbol, params, args)                                                                    \
  TANDEM_EXPORT nvmlReturn_t symbol params {                                                               \
    using namespace tandem::hook;                                                                          \
    auto real = reinterpret_cast<nvmlReturn_t(*) params>(real_nvml(NvmlEntry::symbol));                    \
    if (!real) return NVML_ERROR_FUNCTION_NOT_FOUND;                                                       \
    if (passthrough()) return real args;                                                                   \
    return hook_##symbol TANDEM_WITH_REAL args;                                                            \
  }
#include "nvml_api.def"
#undef NVML_HOOK
}

namespace tandem::hook {

void* nvml_hook_for(const char* name, void* real) noexcept {
  if (!real || !in_nvml_library(real)) return nullptr;
#define NVML_HOOK(symbol, params, args)                                                      \
  if (std::strcmp(name, #symbol) == 0) {                                                     \
    g_real_nvml[static_cast<int>(NvmlEntry::symbol)].store(real, std::memory_order_release);      \
    return reinterpret_cast<void*>(&::symbol);                                               \
  }
#include "nvml_api.def"
#undef NVML_HOOK
  return nullptr;
}

}  // namespace tandem::hook
