// cuGetProcAddress hooks: cudart (>= 11.3), PyTorch and NCCL reach the driver through them.
// We call the real resolver first, so the driver applies cudaVersion and the per-thread
// stream flag; then dladdr tells which exact versioned symbol it chose, and the caller gets
// our hook for that symbol (never a hook with a different ABI).
#include "resolver.h"

#include <dlfcn.h>

#include <cstring>

#include "hooks.h"
#include "log.h"

extern "C" {
#define HOOK(symbol, params, args) CUresult symbol params;
#include "driver_api.def"
#undef HOOK
}

namespace tandem::hook {

namespace {
const HookedSymbol kHooked[] = {
#define HOOK(symbol, params, args) {#symbol, reinterpret_cast<void*>(&::symbol), Entry::symbol},
#include "driver_api.def"
#undef HOOK
};
}  // namespace

const HookedSymbol* find_hooked_symbol(const char* name) noexcept {
  if (!name || name[0] != 'c' || name[1] != 'u') return nullptr;
  for (const HookedSymbol& h : kHooked)
    if (std::strcmp(h.name, name) == 0) return &h;
  return nullptr;
}

void* substitute_hook(void* real) noexcept {
  Dl_info info{};
  if (!real || !dladdr(real, &info) || info.dli_saddr != real || !info.dli_sname) return real;
  const HookedSymbol* h = find_hooked_symbol(info.dli_sname);
  if (!h || real_pointer(h->entry) != real) return real;
  return h->hook;
}

CUresult hook_cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status) noexcept {
  CUdriverProcAddressQueryResult local = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = g_real.cuGetProcAddress_v2(symbol, pfn, version, flags, &local);
  if (status) *status = local;  // always written, whatever the real resolver did
  if (r == CUDA_SUCCESS && pfn && *pfn) {
    void* hooked = substitute_hook(*pfn);
    if (hooked != *pfn) TANDEM_LOG_DEBUG("cuGetProcAddress({}, {}, {}) hooked", symbol, version, flags);
    *pfn = hooked;
  }
  return r;
}

CUresult hook_cuGetProcAddress(const char* symbol, void** pfn, int version,
                               cuuint64_t flags) noexcept {
  CUresult r = g_real.cuGetProcAddress(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn && *pfn) *pfn = substitute_hook(*pfn);
  return r;
}

}  // namespace tandem::hook
