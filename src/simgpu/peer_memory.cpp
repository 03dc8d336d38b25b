// Memory calls that NCCL makes and nothing before it did: pointer attributes it sets
// (SYNC_MEMOPS), and the multicast (NVLS) queries, answered as a PCIe machine without an
// NVSwitch would: not supported. (Memory pools, which NCCL creates one per communicator of,
// are mem_pools.cpp's.)
#include "sim.h"

using namespace simgpu;

// SYNC_MEMOPS and friends: host memory is always synchronous and coherent.
SIM_API CUresult cuPointerSetAttribute(const void* value, CUpointer_attribute attr, CUdeviceptr p) {
  if (!value || !p) return CUDA_ERROR_INVALID_VALUE;
  (void)attr;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMulticastGetGranularity(size_t*, const CUmulticastObjectProp*, CUmulticastGranularity_flags) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
SIM_API CUresult cuMulticastCreate(CUmemGenericAllocationHandle*, const CUmulticastObjectProp*) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
