// Older and newer ABI variants of implemented entry points (cuCtxCreate, cuCtxDestroy, ...),
// forwarding to one implementation each, and the small queries and hints that the CUDA runtime
// issues and a CPU simulation can answer trivially (limits, cache configs, occupancy, peers).
#include <cstdio>
#include <cstring>

#include "sim.h"

using namespace simgpu;

// ---- contexts ----
SIM_API CUresult cuCtxCreate(CUcontext* ctx, unsigned flags, CUdevice dev) { return cuCtxCreate_v2(ctx, flags, dev); }
SIM_API CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
SIM_API CUresult cuCtxPopCurrent(CUcontext* ctx) { return cuCtxPopCurrent_v2(ctx); }
SIM_API CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
SIM_API CUresult cuCtxGetDevice_v2(CUdevice* dev, CUcontext ctx) {
  if (!ctx) return cuCtxGetDevice(dev);
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  auto* c = reinterpret_cast<Context*>(ctx);
  if (c->magic != 0x43545854) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = c->device;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxSynchronize_v2(CUcontext) { return cuCtxSynchronize(); }
SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) cuCtxGetCurrent(&ctx);
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  auto* c = reinterpret_cast<Context*>(ctx);
  *id = c->primary ? static_cast<unsigned long long>(c->device) + 1 : reinterpret_cast<uintptr_t>(c);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

// Limits are remembered so that a program reads back what it set.
namespace {
ProcessMutex g_limit_mutex;
size_t g_limits[CU_LIMIT_MAX] = {1024, 1 << 20, 8 << 20, 2, 2048, 0, 0, 0};
}  // namespace
SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_limit_mutex);
  g_limits[limit] = value;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (!value || limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_limit_mutex);
  *value = g_limits[limit];
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxGetCacheConfig(CUfunc_cache* c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  *c = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxSetCacheConfig(CUfunc_cache) { return CUDA_SUCCESS; }
SIM_API CUresult cuCtxResetPersistingL2Cache() { return CUDA_SUCCESS; }
SIM_API CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache) {
  return as_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
SIM_API CUresult cuProfilerStart() { return CUDA_SUCCESS; }
SIM_API CUresult cuProfilerStop() { return CUDA_SUCCESS; }

// ---- peers: simulated GPUs share one address space ----
SIM_API CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuCtxEnablePeerAccess(CUcontext, unsigned) { return CUDA_SUCCESS; }
SIM_API CUresult cuCtxDisablePeerAccess(CUcontext) { return CUDA_SUCCESS; }
SIM_API CUresult cuDeviceGetP2PAttribute(int* v, CUdevice_P2PAttribute, CUdevice, CUdevice) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 1;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice dev) {
  if (!bus || len < 13) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus, static_cast<size_t>(len), "0000:%02x:00.0", physical_device(dev) + 1);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* bus) {
  unsigned domain = 0, b = 0;
  if (!dev || !bus || std::sscanf(bus, "%x:%x", &domain, &b) != 2) return CUDA_ERROR_INVALID_VALUE;
  int ordinal = ordinal_of_physical(static_cast<int>(b) - 1);  // the bus is the physical GPU's
  if (ordinal < 0) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

// ---- functions ----
SIM_API CUresult cuFuncGetModule(CUmodule* m, CUfunction f) {
  Function* fn = as_function(f);
  if (!m) return CUDA_ERROR_INVALID_VALUE;
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  *m = reinterpret_cast<CUmodule>(fn->module);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuKernelGetLibrary(CUlibrary* lib, CUkernel k) {
  return cuFuncGetModule(reinterpret_cast<CUmodule*>(lib), reinterpret_cast<CUfunction>(k));
}
SIM_API CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction f) {
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  if (!as_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuFuncLoad(CUfunction f) { return as_function(f) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }

// ---- streams ----
#define STREAM_PAIR(name, params, call)                                              \
  SIM_API CUresult name params {                                                     \
    [[maybe_unused]] const bool per_thread = false;                                  \
    return call;                                                                     \
  }                                                                                  \
  SIM_API CUresult name##_ptsz params {                                              \
    [[maybe_unused]] const bool per_thread = true;                                   \
    return call;                                                                     \
  }

// A green context's stream belongs to its converted context (cuStreamGetCtx in cuda.h).
static CUresult stream_ctx(CUstream s, CUcontext* ctx, CUgreenCtx* green, bool per_thread) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (stream_context_destroyed(st)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (green) *green = reinterpret_cast<CUgreenCtx>(st->green);
  if (st->green) {
    *ctx = reinterpret_cast<CUcontext>(&st->green->converted);
    return CUDA_SUCCESS;
  }
  cuCtxGetCurrent(ctx);
  if (!*ctx) *ctx = reinterpret_cast<CUcontext>(primary_context(0));
  return CUDA_SUCCESS;
}
STREAM_PAIR(cuStreamGetCtx, (CUstream s, CUcontext* ctx), stream_ctx(s, ctx, nullptr, per_thread))
STREAM_PAIR(cuStreamGetCtx_v2, (CUstream s, CUcontext* ctx, CUgreenCtx* green), stream_ctx(s, ctx, green, per_thread))

static CUresult stream_id(CUstream s, unsigned long long* id, bool per_thread) {
  Stream* st = resolve_stream(s, per_thread);
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  *id = reinterpret_cast<uintptr_t>(st);
  return CUDA_SUCCESS;
}
STREAM_PAIR(cuStreamGetId, (CUstream s, unsigned long long* id), stream_id(s, id, per_thread))

static CUresult stream_device(CUstream s, CUdevice* dev, bool per_thread) {
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  if (!resolve_stream(s, per_thread)) return CUDA_ERROR_INVALID_HANDLE;
  return cuCtxGetDevice(dev);
}
STREAM_PAIR(cuStreamGetDevice, (CUstream s, CUdevice* dev), stream_device(s, dev, per_thread))

STREAM_PAIR(cuStreamSetAttribute, (CUstream s, CUstreamAttrID, const CUstreamAttrValue*),
            resolve_stream(s, per_thread) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE)
static CUresult stream_get_attr(CUstream s, CUstreamAttrValue* v, bool per_thread) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (!resolve_stream(s, per_thread)) return CUDA_ERROR_INVALID_HANDLE;
  std::memset(v, 0, sizeof *v);
  return CUDA_SUCCESS;
}
STREAM_PAIR(cuStreamGetAttribute, (CUstream s, CUstreamAttrID, CUstreamAttrValue* v), stream_get_attr(s, v, per_thread))

// cuStreamAddCallback: a host function that also receives the stream and a status.
namespace {
struct StreamCallback {
  CUstreamCallback fn;
  CUstream stream;
  void* data;
};
void run_stream_callback(void* p) {
  auto* cb = static_cast<StreamCallback*>(p);
  cb->fn(cb->stream, CUDA_SUCCESS, cb->data);
  delete cb;
}
}  // namespace
static CUresult add_callback(CUstream s, CUstreamCallback fn, void* data, bool per_thread) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  auto* cb = new StreamCallback{fn, s, data};
  CUresult r = per_thread ? cuLaunchHostFunc_ptsz(s, run_stream_callback, cb) : cuLaunchHostFunc(s, run_stream_callback, cb);
  if (r != CUDA_SUCCESS) delete cb;
  return r;
}
STREAM_PAIR(cuStreamAddCallback, (CUstream s, CUstreamCallback fn, void* data, unsigned),
            add_callback(s, fn, data, per_thread))

// Capture info, older layouts.
static CUresult capture_info_v2(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                const CUgraphNode** deps, size_t* n, bool per_thread) {
  return per_thread ? cuStreamGetCaptureInfo_v3_ptsz(s, st, id, g, deps, nullptr, n)
                    : cuStreamGetCaptureInfo_v3(s, st, id, g, deps, nullptr, n);
}
STREAM_PAIR(cuStreamGetCaptureInfo_v2,
            (CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g, const CUgraphNode** d, size_t* n),
            capture_info_v2(s, st, id, g, d, n, per_thread))
STREAM_PAIR(cuStreamGetCaptureInfo, (CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id),
            capture_info_v2(s, st, id, nullptr, nullptr, nullptr, per_thread))

SIM_API CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
SIM_API CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

// ---- graphs: the v1 kernel-node parameters are a prefix of v2's ----
SIM_API CUresult cuGraphAddKernelNode(CUgraphNode* node, CUgraph g, const CUgraphNode* deps, size_t n,
                                      const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2{};
  std::memcpy(&v2, p, sizeof *p);
  return cuGraphAddKernelNode_v2(node, g, deps, n, &v2);
}
SIM_API CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2{};
  CUresult r = cuGraphKernelNodeGetParams_v2(node, &v2);
  if (r == CUDA_SUCCESS) std::memcpy(p, &v2, sizeof *p);
  return r;
}
SIM_API CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph g, CUgraphNode* err_node, char* log, size_t log_size) {
  return cuGraphInstantiate_v2(exec, g, err_node, log, log_size);
}

// ---- memory hints and pools: accepted, nothing to do on host memory ----
STREAM_PAIR(cuMemPrefetchAsync_v2, (CUdeviceptr p, size_t n, CUmemLocation, unsigned, CUstream s),
            valid_device_range(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE)
STREAM_PAIR(cuMemPrefetchAsync, (CUdeviceptr p, size_t n, CUdevice, CUstream s),
            valid_device_range(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE)
SIM_API CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise, CUmemLocation) {
  return valid_device_range(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIM_API CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise, CUdevice) {
  return valid_device_range(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
// cudaStreamAttachMemAsync: which streams may touch managed memory. All memory is the host's
// here, so there is nothing to move or restrict: the call is checked as cuda.h says (flags one
// of CUmemAttach_flags, no single attachment to the NULL stream, a managed allocation from its
// start with length 0 or its whole size, pageable memory with a length) and does nothing.
static CUresult attach_mem(CUstream h, CUdeviceptr p, size_t length, unsigned flags, bool per_thread) {
  Stream* st = resolve_stream(h, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
    return CUDA_ERROR_INVALID_VALUE;
  if (flags == CU_MEM_ATTACH_SINGLE && (!h || st->legacy)) return CUDA_ERROR_INVALID_VALUE;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr base = 0;
  size_t size = 0;
  if (allocation_of(p, &base, &size)) return p == base && (length == 0 || length == size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return length ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
STREAM_PAIR(cuStreamAttachMemAsync, (CUstream s, CUdeviceptr p, size_t length, unsigned flags),
            attach_mem(s, p, length, flags, per_thread))

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool, size_t) { return CUDA_SUCCESS; }
SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool, CUmemPool_attribute, void*) { return CUDA_SUCCESS; }
SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool, CUmemPool_attribute attr, void* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
      attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
    *static_cast<int*>(v) = 1;
  else
    *static_cast<cuuint64_t*>(v) = 0;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) { return cuDeviceGetDefaultMemPool(pool, dev); }
SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool) {
  return valid_device(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned flags) {
  if (!d || !p || flags) return CUDA_ERROR_INVALID_VALUE;
  *d = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuMemHostGetFlags(unsigned* flags, void* p) {
  if (!flags || !p) return CUDA_ERROR_INVALID_VALUE;
  *flags = 0;
  return CUDA_SUCCESS;
}
