// The real driver: one table of function pointers generated from driver_api.def and
// driver_used.def, resolved once at bootstrap. After resolve_real_driver() every pointer
// is callable: a symbol the real driver lacks points at a stub returning an error.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cuda_abi.h"

namespace tandem::hook {

// Every hooked symbol, in table order; used to index per-entry counters.
enum class Entry : uint16_t {
#define HOOK(symbol, params, args) symbol,
#include "driver_api.def"
#undef HOOK
  count
};
constexpr size_t kEntryCount = static_cast<size_t>(Entry::count);

struct RealDriver {
#define HOOK(symbol, params, args) CUresult(*symbol) params;
#include "driver_api.def"
#undef HOOK
#define USE(symbol, params) CUresult(*symbol) params;
#include "driver_used.def"
#undef USE
};

// The table. Read without synchronization once bootstrap has published readiness.
extern RealDriver g_real;

// Opens the real driver (`path`, e.g. "libcuda.so.1") and fills g_real. Returns false, with
// the reason in `error`, when the library cannot be used; g_real then holds error stubs.
bool resolve_real_driver(const char* path, char* error, size_t error_size) noexcept;

// The exact exported name of a hooked entry, and the real driver's pointer for it.
const char* entry_name(Entry entry) noexcept;
void* real_pointer(Entry entry) noexcept;

// glibc's dlsym, found with dlvsym so that our own `dlsym` export is bypassed.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym() noexcept;

}  // namespace tandem::hook
