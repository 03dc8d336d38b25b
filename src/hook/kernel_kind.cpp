#include "kernel_kind.h"

#include <cstring>

#include "handle_map.h"
#include "log.h"
#include "real_driver.h"

namespace tandem::hook {

bool is_nccl_kernel_name(const char* name) noexcept {
  if (!name) return false;
  return std::strstr(name, "ncclDevKernel_") || std::strstr(name, "ncclKernel") ||
         std::strstr(name, "ncclSymkDevKernel_");
}

bool is_nccl_p2p_kernel_name(const char* name) noexcept {
  return is_nccl_kernel_name(name) && std::strstr(name, "_SendRecv");
}

namespace {

KernelKind resolve_kind(CUfunction f) noexcept {
  const char* name = nullptr;
  // Launch APIs accept CUkernel handles where a CUfunction is expected; so do we.
  if (g_real.cuFuncGetName(&name, f) != CUDA_SUCCESS || !name) {
    name = nullptr;
    if (g_real.cuKernelGetName(&name, reinterpret_cast<CUkernel>(f)) != CUDA_SUCCESS) name = nullptr;
  }
  KernelKind kind = is_nccl_p2p_kernel_name(name) ? KernelKind::nccl_p2p
                    : is_nccl_kernel_name(name)   ? KernelKind::nccl
                                                  : KernelKind::compute;
  TANDEM_LOG_DEBUG("kernel {} = {} ({})", static_cast<const void*>(f), name ? name : "<unnamed>",
                   kind == KernelKind::nccl_p2p ? "nccl p2p" : kind == KernelKind::nccl ? "nccl" : "compute");
  return kind;
}

}  // namespace

KernelKind kernel_kind(CUfunction f) noexcept {
  uintptr_t key = reinterpret_cast<uintptr_t>(f);
  uint64_t cached = function_kinds().find(key);
  if (__builtin_expect(cached != HandleMap::kAbsent, 1)) return static_cast<KernelKind>(cached);
  KernelKind kind = resolve_kind(f);
  function_kinds().put(key, static_cast<uint64_t>(kind));
  return kind;
}

}  // namespace tandem::hook
