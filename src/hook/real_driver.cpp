#include "real_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>

namespace tandem::hook {

namespace {

// Stubs for symbols the real driver does not export (an older driver, or a stripped one).
#define HOOK(symbol, params, args) \
  CUresult missing_##symbol params { return CUDA_ERROR_NOT_FOUND; }
#include "driver_api.def"
#undef HOOK
#define USE(symbol, params) \
  CUresult missing_##symbol params { return CUDA_ERROR_NOT_FOUND; }
#include "driver_used.def"
#undef USE

RealDriver stub_table() noexcept {
  RealDriver table{};
#define HOOK(symbol, params, args) table.symbol = missing_##symbol;
#include "driver_api.def"
#undef HOOK
#define USE(symbol, params) table.symbol = missing_##symbol;
#include "driver_used.def"
#undef USE
  return table;
}

std::atomic<DlsymFn> g_real_dlsym{nullptr};

}  // namespace

RealDriver g_real = stub_table();

DlsymFn real_dlsym() noexcept {
  DlsymFn fn = g_real_dlsym.load(std::memory_order_acquire);
  if (fn) return fn;
  // glibc >= 2.34 versions dlsym GLIBC_2.34; older ones GLIBC_2.2.5 (x86-64) or GLIBC_2.17 (aarch64).
  for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"}) {
    fn = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", version));
    if (fn) break;
  }
  g_real_dlsym.store(fn, std::memory_order_release);
  return fn;
}

bool resolve_real_driver(const char* path, char* error, size_t error_size) noexcept {
  DlsymFn lookup = real_dlsym();
  if (!lookup) {
    std::snprintf(error, error_size, "cannot find glibc's dlsym");
    return false;
  }
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* reason = dlerror();
    std::snprintf(error, error_size, "cannot load the real driver '%s': %s", path,
                  reason ? reason : "unknown error");
    return false;
  }
  // The real driver must not be tandem itself (a libtandem renamed libcuda.so.1).
  if (lookup(handle, "tandem_version")) {
    std::snprintf(error, error_size, "'%s' is libtandem itself, not the real driver", path);
    return false;
  }
  RealDriver table = stub_table();
#define RESOLVE(symbol)                                                          \
  if (void* p = lookup(handle, #symbol)) {                                       \
    table.symbol = reinterpret_cast<decltype(table.symbol)>(p);                  \
  }
#define HOOK(symbol, params, args) RESOLVE(symbol)
#include "driver_api.def"
#undef HOOK
#define USE(symbol, params) RESOLVE(symbol)
#include "driver_used.def"
#undef USE
#undef RESOLVE
  g_real = table;
  return true;
}

const char* entry_name(Entry entry) noexcept {
  static constexpr const char* kNames[] = {
#define HOOK(symbol, params, args) #symbol,
#include "driver_api.def"
#undef HOOK
  };
  size_t i = static_cast<size_t>(entry);
  return i < kEntryCount ? kNames[i] : "?";
}

void* real_pointer(Entry entry) noexcept {
  switch (entry) {
#define HOOK(symbol, params, args) \
  case Entry::symbol: return reinterpret_cast<void*>(g_real.symbol);
#include "driver_api.def"
#undef HOOK
    case Entry::count: break;
  }
  return nullptr;
}

}  // namespace tandem::hook
