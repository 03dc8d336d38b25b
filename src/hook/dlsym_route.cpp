// The dlsym override's decision (the entry point itself is dlsym_trampoline.S).
// cudart does dlopen("libcuda.so.1") + dlsym(handle, "cuGetProcAddress_v2"), Triton does
// dlsym(dlopen(...), "cuLaunchKernel"): handle lookups never see LD_PRELOAD, so we answer
// them; so does pynvml (ctypes: dlopen("libnvidia-ml.so.1") + dlsym) for NVML's memory
// queries (nvml_hooks.h). Everything else goes to glibc's dlsym by a tail jump from the trampoline, which keeps
// the caller's return address: RTLD_NEXT keeps meaning "next after the caller".
#include <dlfcn.h>

#include "nvml_hooks.h"
#include "process.h"
#include "real_driver.h"
#include "resolver.h"

namespace tandem::hook {

struct DlsymRoute {
  void* hook;         // non-null: return this to the caller
  void* real_dlsym;   // otherwise: tail-jump here with the caller's original arguments
};

extern "C" __attribute__((visibility("hidden"))) DlsymRoute tandem_dlsym_route(
    void* handle, const char* name) noexcept {
  DlsymRoute route{nullptr, reinterpret_cast<void*>(real_dlsym())};
  // Cheap filters first: this runs for every dlsym in the process.
  if (handle == RTLD_DEFAULT || handle == RTLD_NEXT) return route;  // LD_PRELOAD already applies
  const HookedSymbol* h = find_hooked_symbol(name);
  bool nvml = !h && is_hooked_nvml_symbol(name);
  if ((!h && !nvml) || bootstrapping_on_this_thread()) return route;
  if (passthrough()) return route;
  if (nvml) {
    route.hook = nvml_hook_for(name, real_dlsym()(handle, name));
    return route;
  }
  // Only answer for the real driver: the handle must resolve the name to the real function.
  void* real = real_dlsym()(handle, name);
  if (real && real == real_pointer(h->entry)) route.hook = h->hook;
  return route;
}

}  // namespace tandem::hook
