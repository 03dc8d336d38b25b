// Memory calls that NCCL makes and nothing before it did: explicit memory pools (NCCL
// creates one per communicator for its own allocations), pointer attributes it sets
// (SYNC_MEMOPS), and the multicast (NVLS) queries, answered as a PCIe machine without an
// NVSwitch would: not supported.
#include "sim.h"

using namespace simgpu;

namespace {
struct Pool {
  uint32_t magic = 0x504f4f4c;
  CUmemPoolProps props{};
};
Pool* as_pool(CUmemoryPool p) {
  auto* pool = reinterpret_cast<Pool*>(p);
  return pool && pool->magic == 0x504f4f4c ? pool : nullptr;
}
}  // namespace

// A pool is a tag: cuMemAllocFromPoolAsync allocates device memory whatever the pool.
SIM_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!pool || !props) return CUDA_ERROR_INVALID_VALUE;
  if (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(props->location.id))
    return CUDA_ERROR_INVALID_DEVICE;
  auto* p = new Pool();
  p->props = *props;
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  Pool* p = as_pool(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  p->magic = 0;
  delete p;
  return CUDA_SUCCESS;
}

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
