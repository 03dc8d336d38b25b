// Initialisation, devices (a Hopper-like GPU), contexts, error strings.
#include <cstdio>
#include <cstring>

#include "sim.h"

namespace simgpu {

namespace {
std::atomic<bool> g_initialized{false};
thread_local Context* t_current = nullptr;
thread_local std::vector<Context*> t_stack;
std::mutex g_ctx_mutex;
Context g_primary[16];
int g_primary_refs[16];
}  // namespace

bool initialized() { return g_initialized.load(); }
bool valid_device(CUdevice d) { return d >= 0 && d < settings().devices; }
Context* primary_context(int device) {
  g_primary[device].device = device;
  g_primary[device].primary = true;
  return &g_primary[device];
}
Context* current_context() { return t_current; }

}  // namespace simgpu

using namespace simgpu;

#define REQUIRE_INIT() \
  do {                 \
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

SIM_API CUresult cuInit(unsigned int flags) {
  SIM_FAIL_POINT();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g_initialized = true;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int* count) {
  REQUIRE_INIT();
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = settings().devices;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  REQUIRE_INIT();
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  REQUIRE_INIT();
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "tandem simulated GPU %d", dev);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  REQUIRE_INIT();
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = settings().mem_bytes;
  return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid* uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, "simgpu-uuid-", 12);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return device_uuid(uuid, dev); }
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return device_uuid(uuid, dev); }

SIM_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice dev) {
  REQUIRE_INIT();
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  int v = 0;
  if (limit_attribute(attr, &v)) {  // limits.cpp: shared memory, multicast, fabric, RDMA
    *value = v;
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = settings().sms; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1755000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 2; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = dev; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 50 << 20; break;
    default: v = 0;
  }
  *value = v;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  REQUIRE_INIT();
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(g_ctx_mutex);
  ++g_primary_refs[dev];
  *ctx = reinterpret_cast<CUcontext>(primary_context(dev));
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lock(g_ctx_mutex);
  if (g_primary_refs[dev] > 0) --g_primary_refs[dev];
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  primary_context(dev)->flags = flags;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (flags) *flags = primary_context(dev)->flags;
  if (active) *active = g_primary_refs[dev] > 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  synchronize_all();
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(t_current);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  t_current = reinterpret_cast<Context*>(ctx);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  t_stack.push_back(t_current);
  t_current = reinterpret_cast<Context*>(ctx);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (ctx) *ctx = reinterpret_cast<CUcontext>(t_current);
  if (t_stack.empty()) {
    t_current = nullptr;
  } else {
    t_current = t_stack.back();
    t_stack.pop_back();
  }
  return CUDA_SUCCESS;
}

static CUresult create_context(CUcontext* ctx, unsigned flags, CUdevice dev) {
  REQUIRE_INIT();
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto* c = new Context();
  c->device = dev;
  c->flags = flags;
  t_stack.push_back(t_current);
  t_current = c;
  *ctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned flags, CUdevice dev) {
  return create_context(ctx, flags, dev);
}
SIM_API CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned flags, CUdevice dev) {
  (void)params;
  return create_context(ctx, flags, dev);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  auto* c = reinterpret_cast<Context*>(ctx);
  if (!c || c->magic != 0x43545854) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_current == c) t_current = nullptr;
  if (!c->primary) delete c;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice* dev) {
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  *dev = t_current ? t_current->device : 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSynchronize() {
  SIM_FAIL_POINT();
  return synchronize_all();
}

SIM_API CUresult cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = t_current ? t_current->flags : 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  (void)ctx;
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define NAME(e) case e: *str = #e; return CUDA_SUCCESS;
    NAME(CUDA_SUCCESS) NAME(CUDA_ERROR_INVALID_VALUE) NAME(CUDA_ERROR_OUT_OF_MEMORY)
    NAME(CUDA_ERROR_NOT_INITIALIZED) NAME(CUDA_ERROR_INVALID_DEVICE) NAME(CUDA_ERROR_INVALID_IMAGE)
    NAME(CUDA_ERROR_INVALID_CONTEXT) NAME(CUDA_ERROR_INVALID_HANDLE) NAME(CUDA_ERROR_NOT_FOUND)
    NAME(CUDA_ERROR_NOT_READY) NAME(CUDA_ERROR_LAUNCH_FAILED) NAME(CUDA_ERROR_NOT_SUPPORTED)
    NAME(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) NAME(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    NAME(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) NAME(CUDA_ERROR_CAPTURED_EVENT)
    NAME(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) NAME(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED)
    NAME(CUDA_ERROR_ILLEGAL_STATE) NAME(CUDA_ERROR_UNKNOWN)
#undef NAME
    default: *str = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}

SIM_API CUresult cuGetErrorString(CUresult error, const char** str) {
  CUresult r = cuGetErrorName(error, str);
  return r;
}

// cudart's private export tables are not provided: see docs/simgpu.md ("CUDA runtime").
SIM_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
}

namespace {
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
}
CUstreamCaptureMode simgpu::thread_capture_mode() { return t_capture_mode; }

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  return CUDA_SUCCESS;
}
