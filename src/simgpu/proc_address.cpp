// cuGetProcAddress: maps an API name, the caller's CUDA version and the per-thread-stream
// flag to the exact exported ABI symbol, as the real driver does (entry_points.def is the one
// list). Every pointer handed out is an exported function whose dladdr name is that versioned
// symbol, so an interposer can learn which variant the caller got.
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "entry_points.h"
#include "sim.h"

namespace {

using Index = std::unordered_multimap<std::string_view, const SimEntryPoint*>;

const Index& index() {
  static Index* idx = [] {
    auto* m = new Index;  // never destroyed: resolution may happen during exit
    for (size_t i = 0; i < simgpu_entry_point_count; ++i) m->emplace(simgpu_entry_points[i].api, &simgpu_entry_points[i]);
    return m;
  }();
  return *idx;
}

// The newest row of `api` not newer than `version`, per-thread rows first when asked for.
CUresult resolve(const char* api, int version, bool per_thread, void** fn, CUdriverProcAddressQueryResult* status) {
  auto [lo, hi] = index().equal_range(api);
  if (lo == hi) {
    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  const SimEntryPoint* best = nullptr;
  for (int pass = per_thread ? 1 : 0; pass >= 0 && !best; --pass)
    for (auto it = lo; it != hi; ++it) {
      const SimEntryPoint* e = it->second;
      if (e->per_thread == pass && e->version <= version && (!best || e->version > best->version)) best = e;
    }
  if (!best) {
    *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  *fn = best->fn;
  *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

SIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* status) {
  CUdriverProcAddressQueryResult local;
  const bool asked = status != nullptr;
  if (!status) status = &local;
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  CUresult r = resolve(symbol, version, flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, pfn, status);
  if (r == CUDA_SUCCESS) return r;
  simgpu::log(3, "cuGetProcAddress: %s (version %d) not provided", symbol, version);
  // A caller that reads the status is answered CUDA_SUCCESS with a null pointer, as the real
  // driver does (seen on an H200, driver 580: an unknown symbol or one newer than the version
  // asked for); one that cannot read it, with the error.
  return asked ? CUDA_SUCCESS : r;
}

SIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

// Per-thread twin: the resolver itself has no stream semantics.
SIM_API CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, status);
}
