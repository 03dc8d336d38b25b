// Initialisation, devices (a Hopper-like GPU), contexts, error strings.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "sim.h"

namespace simgpu {

namespace {
std::atomic<bool> g_initialized{false};
thread_local Context* t_current = nullptr;
thread_local std::vector<Context*> t_stack;
ProcessMutex g_ctx_mutex;
Context g_primary[16];
int g_primary_refs[16];
}  // namespace

bool initialized() { return g_initialized.load(); }

namespace {
// The real driver tears its state down at exit, in handlers that cuInit registers; a thread
// still calling it then meets freed state (a crash, or CUDA_ERROR_DEINITIALIZED). Modelled
// where SIMGPU_EXIT_TEARDOWN_US is set: the teardown lasts that long; the event calls made from
// its start on answer CUDA_ERROR_DEINITIALIZED and are counted, and its end says how many came.
std::atomic<bool> g_torn_down{false};
std::atomic<uint64_t> g_calls_in_teardown{0};

void exit_teardown() {
  g_torn_down.store(true);
  timespec ts{static_cast<time_t>(settings().exit_teardown_ns / 1000000000ull),
              static_cast<long>(settings().exit_teardown_ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  if (uint64_t n = g_calls_in_teardown.load())
    std::fprintf(stderr, "[simgpu %d] error: %llu driver calls during the driver's exit teardown\n",
                 static_cast<int>(getpid()), static_cast<unsigned long long>(n));
}
}  // namespace

bool torn_down() {
  if (!g_torn_down.load(std::memory_order_relaxed)) return false;
  g_calls_in_teardown.fetch_add(1);
  return true;
}
bool valid_device(CUdevice d) { return d >= 0 && d < visible_device_count(); }
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
  // Like the real driver: no visible GPU (CUDA_VISIBLE_DEVICES="" or naming none) fails init.
  if (visible_device_count() == 0) return CUDA_ERROR_NO_DEVICE;
  static std::atomic<bool> teardown_registered{false};
  if (settings().exit_teardown_ns && !teardown_registered.exchange(true)) atexit(exit_teardown);
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
  *count = visible_device_count();
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
  std::snprintf(name, static_cast<size_t>(len), "tandem simulated GPU %d", physical_device(dev));
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
  physical_uuid(physical_device(dev), reinterpret_cast<unsigned char*>(uuid->bytes));
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return device_uuid(uuid, dev); }
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return device_uuid(uuid, dev); }

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
  if (CUresult r = refuse_context_sync_during_capture()) return r;
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
    NAME(CUDA_ERROR_NOT_INITIALIZED) NAME(CUDA_ERROR_NO_DEVICE) NAME(CUDA_ERROR_NO_BINARY_FOR_GPU) NAME(CUDA_ERROR_INVALID_DEVICE) NAME(CUDA_ERROR_INVALID_IMAGE)
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
