// cuGetProcAddress: maps an API name, the caller's CUDA version and the per-thread-stream
// flag to the exact exported ABI symbol, as the real driver does. Every pointer handed out is
// an exported function whose dladdr name is that versioned symbol.
#include <cstring>
#include <string>

#include "sim.h"

extern "C" {
struct SimEntryPoint {
  const char* name;
  void* fn;
};
// Generated at build time from the defined symbols of the object files (gen_entry_points.sh).
extern const SimEntryPoint simgpu_entry_points[];
extern const unsigned simgpu_entry_point_count;
}

namespace {

void* find(const std::string& name) {
  for (unsigned i = 0; i < simgpu_entry_point_count; ++i)
    if (name == simgpu_entry_points[i].name) return simgpu_entry_points[i].fn;
  return nullptr;
}

// Names whose versioned symbol depends on the caller's CUDA version.
std::string versioned_alias(const char* symbol, int version) {
  if (!std::strcmp(symbol, "cuGetProcAddress")) return version >= 12000 ? "cuGetProcAddress_v2" : "cuGetProcAddress";
  if (!std::strcmp(symbol, "cuGraphInstantiate"))
    return version >= 12000 ? "cuGraphInstantiateWithFlags" : "cuGraphInstantiate_v2";
  return "";
}

void* resolve(const char* symbol, int version, cuuint64_t flags) {
  std::string alias = versioned_alias(symbol, version);
  if (!alias.empty()) return find(alias);
  bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  for (const char* suffix : {"_v4", "_v3", "_v2", ""}) {
    std::string base = std::string(symbol) + suffix;
    if (per_thread) {
      if (void* p = find(base + "_ptsz")) return p;
      if (void* p = find(base + "_ptds")) return p;
    }
    if (void* p = find(base)) return p;
  }
  return nullptr;
}

}  // namespace

SIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = resolve(symbol, version, flags);
  if (status) *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (!*pfn) simgpu::log(3, "cuGetProcAddress: %s not provided", symbol);
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}
