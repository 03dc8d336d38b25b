// Classifies kernels as compute, NCCL collective or NCCL point-to-point by name, resolved once
// per handle. Point-to-point (NCCL's SendRecv kernel: ncclDevKernel_SendRecv from NCCL 2.19,
// ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t before) is a pipeline stage's send or receive; a
// receive waits for its peer, and tandemd fills that wait as an ordinary bubble.
#pragma once
#include "cuda_abi.h"

namespace tandem::hook {

enum class KernelKind : uint64_t { compute = 1, nccl = 2, nccl_p2p = 3 };

// Any NCCL kernel, collective or point-to-point: never held back alone, a bubble's communication.
inline bool is_nccl(KernelKind k) noexcept { return k != KernelKind::compute; }

// True for NCCL device kernels: ncclDevKernel_*, ncclKernel*, ncclSymkDevKernel_*, also mangled.
bool is_nccl_kernel_name(const char* name) noexcept;
// True for NCCL's point-to-point kernel (an NCCL kernel whose name holds "_SendRecv"). Every
// other NCCL kernel (ncclDevKernel_Generic included, which may run any work) is a collective.
bool is_nccl_p2p_kernel_name(const char* name) noexcept;

// Kind of a CUfunction or CUkernel handle. Lock-free after the first call per handle.
KernelKind kernel_kind(CUfunction f) noexcept;

}  // namespace tandem::hook
