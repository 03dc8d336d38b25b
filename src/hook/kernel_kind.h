// Classifies kernels as compute or NCCL communication by name, resolved once per handle.
#pragma once
#include "cuda_abi.h"

namespace tandem::hook {

enum class KernelKind : uint64_t { compute = 1, nccl = 2 };

// True for NCCL device kernels: ncclDevKernel_*, ncclKernel*, ncclSymkDevKernel_*, also mangled.
bool is_nccl_kernel_name(const char* name) noexcept;

// Kind of a CUfunction or CUkernel handle. Lock-free after the first call per handle.
KernelKind kernel_kind(CUfunction f) noexcept;

}  // namespace tandem::hook
