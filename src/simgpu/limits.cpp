// What an H100 SXM answers about shared memory, per device and per function, and the
// device attributes of a PCIe machine that NCCL reads to choose its transports: no NVSwitch
// multicast (NVLS), no fabric handles, no GPUDirect RDMA, no dma-buf. A kernel that asks for
// more dynamic shared memory than its function allows fails to launch, as on the real GPU,
// so that a library which forgets cuFuncSetAttribute fails here as it would there.
#include "sim.h"

namespace simgpu {

namespace {
constexpr int kSharedPerBlockOptin = 227 << 10;  // the ceiling of a function's opt-in (48 KiB without)
constexpr int kSharedPerSm = 228 << 10;
constexpr int kReservedSharedPerBlock = 1 << 10;
}  // namespace

bool limit_attribute(CUdevice_attribute attr, int* v) {
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = kSharedPerBlockOptin; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = kSharedPerSm; return true;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = kReservedSharedPerBlock; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = 32; return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; return true;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: *v = 1; return true;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: *v = 4; return true;
    // Stream memory operations (cuStreamWaitValue/WriteValue, stream_memops.cpp).
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: *v = 1; return true;
    // A PCIe machine: no NVSwitch multicast, no IMEX fabric, no RDMA-capable NIC path.
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: *v = 0; return true;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: *v = settings().mps ? 1 : 0; return true;  // SIMGPU_SHARING=mps: an MPS client
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: *v = -1; return true;  // no NUMA on the host
    default: return false;
  }
}


}  // namespace simgpu
