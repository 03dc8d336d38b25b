// A small CUDA runtime (libcudart.so.13) for the simulated GPU. nvcc's own cudart requires
// private driver export tables, one of which is an integrity check we do not reimplement
// (docs/simgpu.md). Programs built with `nvcc -cudart shared` run unchanged on a real GPU
// (NVIDIA's libcudart.so.13) and on the simulated one (this library, first on
// LD_LIBRARY_PATH). Like NVIDIA's runtime, it reaches the driver through
// dlopen("libcuda.so.1") + cuGetProcAddress_v2, once with the legacy-stream flag and once with
// the per-thread flag, so a preloaded interposer sees exactly what it sees under cudart.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#undef cuGetProcAddress

#define RT_API extern "C" __attribute__((visibility("default")))

namespace {

// Driver entry points, resolved twice: [0] legacy default stream, [1] per-thread.
#define DRIVER_FUNCTIONS(X)                                                                        \
  X(cuInit) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName) X(cuDeviceGetAttribute)          \
  X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize)           \
  X(cuDriverGetVersion) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost)              \
  X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemGetInfo) X(cuMemcpy) X(cuMemcpyAsync)                \
  X(cuMemsetD8) X(cuMemsetD8Async) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)     \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuStreamBeginCapture) X(cuStreamEndCapture)              \
  X(cuStreamIsCapturing) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) \
  X(cuEventQuery) X(cuEventElapsedTime) X(cuGraphInstantiate) X(cuGraphLaunch)                     \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuLibraryLoadData) X(cuLibraryGetKernel)               \
  X(cuLaunchKernel) X(cuLaunchHostFunc)

struct Driver {
#define FIELD(name) void* name = nullptr;
  DRIVER_FUNCTIONS(FIELD)
#undef FIELD
};

Driver g_driver[2];
cudaError_t g_init_error = cudaSuccess;
std::once_flag g_once;

void load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    g_init_error = cudaErrorInsufficientDriver;
    return;
  }
  using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto gpa = reinterpret_cast<Gpa>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!gpa) {
    g_init_error = cudaErrorInsufficientDriver;
    return;
  }
  for (int pt = 0; pt < 2; ++pt) {
    cuuint64_t flags = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    CUdriverProcAddressQueryResult status;
#define RESOLVE(name) gpa(#name, &g_driver[pt].name, CUDA_VERSION, flags, &status);
    DRIVER_FUNCTIONS(RESOLVE)
#undef RESOLVE
  }
  using Init = CUresult (*)(unsigned);
  if (!g_driver[0].cuInit || reinterpret_cast<Init>(g_driver[0].cuInit)(0) != CUDA_SUCCESS)
    g_init_error = cudaErrorNoDevice;
}

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;
thread_local bool t_context_set = false;

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// CUresult and cudaError_t agree on the codes this runtime can produce, except a few.
cudaError_t to_runtime(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    default: return static_cast<cudaError_t>(r);
  }
}

// Every API call starts here: driver loaded, primary context current on this thread.
cudaError_t ready() {
  std::call_once(g_once, load_driver);
  if (g_init_error != cudaSuccess) return g_init_error;
  if (!t_context_set) {
    CUcontext ctx;
    auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(g_driver[0].cuDevicePrimaryCtxRetain);
    auto set = reinterpret_cast<CUresult (*)(CUcontext)>(g_driver[0].cuCtxSetCurrent);
    CUresult r = retain(&ctx, t_device);
    if (r == CUDA_SUCCESS) r = set(ctx);
    if (r != CUDA_SUCCESS) return to_runtime(r);
    t_context_set = true;
  }
  return cudaSuccess;
}

template <typename Fn>
Fn drv(void* Driver::*field, bool per_thread) {
  return reinterpret_cast<Fn>(g_driver[per_thread ? 1 : 0].*field);
}

#define CALL(per_thread, name, type, ...)                                           \
  ([&]() -> cudaError_t {                                                           \
    cudaError_t e_ = ready();                                                       \
    if (e_ != cudaSuccess) return record(e_);                                       \
    auto f_ = drv<type>(&Driver::name, per_thread);                                 \
    if (!f_) return record(cudaErrorNotSupported);                                  \
    return record(to_runtime(f_(__VA_ARGS__)));                                     \
  }())

// ---- kernel registration (what nvcc's host stubs call) ----
struct FatBinary {
  const void* wrapper;
  CUlibrary library = nullptr;
};
struct KernelRecord {
  FatBinary* binary;
  std::string name;
  CUkernel kernel = nullptr;
};
std::mutex g_reg_mutex;
std::unordered_map<const void*, KernelRecord>* g_kernels = new std::unordered_map<const void*, KernelRecord>();

struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
};
thread_local std::vector<LaunchConfig> t_configs;

cudaError_t get_kernel(CUkernel* out, const void* host_fun) {
  cudaError_t e = ready();
  if (e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(g_reg_mutex);
  auto it = g_kernels->find(host_fun);
  if (it == g_kernels->end()) return cudaErrorInvalidDeviceFunction;
  KernelRecord& k = it->second;
  if (!k.kernel) {
    if (!k.binary->library) {
      auto load = reinterpret_cast<CUresult (*)(CUlibrary*, const void*, CUjit_option*, void**, unsigned,
                                                CUlibraryOption*, void**, unsigned)>(g_driver[0].cuLibraryLoadData);
      CUresult r = load(&k.binary->library, k.binary->wrapper, nullptr, nullptr, 0, nullptr, nullptr, 0);
      if (r != CUDA_SUCCESS) return to_runtime(r);
    }
    auto get = reinterpret_cast<CUresult (*)(CUkernel*, CUlibrary, const char*)>(g_driver[0].cuLibraryGetKernel);
    CUresult r = get(&k.kernel, k.binary->library, k.name.c_str());
    if (r != CUDA_SUCCESS) return to_runtime(r);
  }
  *out = k.kernel;
  return cudaSuccess;
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);

cudaError_t launch(CUkernel k, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t s, bool per_thread) {
  return CALL(per_thread, cuLaunchKernel, LaunchFn, reinterpret_cast<CUfunction>(k), g.x, g.y, g.z, b.x, b.y,
              b.z, static_cast<unsigned>(smem), reinterpret_cast<CUstream>(s), args, nullptr);
}

}  // namespace

RT_API void** __cudaRegisterFatBinary(void* fat_cubin) {
  auto* b = new FatBinary{fat_cubin};
  return reinterpret_cast<void**>(b);
}
RT_API void __cudaRegisterFatBinaryEnd(void** handle) { (void)handle; }
RT_API void __cudaUnregisterFatBinary(void** handle) { (void)handle; }  // process exit: nothing to free
RT_API char __cudaInitModule(void** handle) {
  (void)handle;
  return 1;
}
RT_API void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun, const char* device_name,
                                   int thread_limit, uint3* tid, uint3* bid, dim3* bdim, dim3* gdim, int* wsize) {
  (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
  std::lock_guard<std::mutex> lock(g_reg_mutex);
  (*g_kernels)[host_fun] = KernelRecord{reinterpret_cast<FatBinary*>(handle), device_name};
}
RT_API void __cudaRegisterVar(void** h, char* hv, char* da, const char* dn, int ext, size_t size, int c, int g) {
  (void)h, (void)hv, (void)da, (void)dn, (void)ext, (void)size, (void)c, (void)g;
}
RT_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, struct CUstream_st* stream) {
  t_configs.push_back({grid, block, smem, stream});
  return 0;
}
RT_API cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* smem, void* stream) {
  if (t_configs.empty()) return cudaErrorMissingConfiguration;
  LaunchConfig c = t_configs.back();
  t_configs.pop_back();
  *grid = c.grid;
  *block = c.block;
  *smem = c.smem;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}
RT_API cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_fun) {
  return record(get_kernel(reinterpret_cast<CUkernel*>(kernel), host_fun));
}
RT_API cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t s) {
  return launch(reinterpret_cast<CUkernel>(k), g, b, args, smem, s, false);
}
RT_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t s) {
  return launch(reinterpret_cast<CUkernel>(k), g, b, args, smem, s, true);
}
static cudaError_t launch_host_fun(const void* f, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t s, bool pt) {
  CUkernel k;
  cudaError_t e = get_kernel(&k, f);
  if (e != cudaSuccess) return record(e);
  return launch(k, g, b, args, smem, s, pt);
}
RT_API cudaError_t cudaLaunchKernel(const void* f, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t s) {
  return launch_host_fun(f, g, b, args, smem, s, false);
}
RT_API cudaError_t cudaLaunchKernel_ptsz(const void* f, dim3 g, dim3 b, void** args, size_t smem, cudaStream_t s) {
  return launch_host_fun(f, g, b, args, smem, s, true);
}

// ---- the runtime API ----
using MemcpyFn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);
using MemcpyAsyncFn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
using MemsetFn = CUresult (*)(CUdeviceptr, unsigned char, size_t);
using MemsetAsyncFn = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
using StreamFn = CUresult (*)(CUstream);
using EventRecordFn = CUresult (*)(CUevent, CUstream);
using WaitEventFn = CUresult (*)(CUstream, CUevent, unsigned);
using BeginCaptureFn = CUresult (*)(CUstream, CUstreamCaptureMode);
using EndCaptureFn = CUresult (*)(CUstream, CUgraph*);
using IsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);
using AllocAsyncFn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using FreeAsyncFn = CUresult (*)(CUdeviceptr, CUstream);
using HostFuncFn = CUresult (*)(CUstream, CUhostFn, void*);

#define CU(p) reinterpret_cast<CUdeviceptr>(p)
#define ST(s) reinterpret_cast<CUstream>(s)

static cudaError_t memcpy_impl(bool pt, void* dst, const void* src, size_t n) {
  return CALL(pt, cuMemcpy, MemcpyFn, CU(dst), CU(src), n);
}
RT_API cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) { (void)k; return memcpy_impl(false, d, s, n); }
RT_API cudaError_t cudaMemcpy_ptds(void* d, const void* s, size_t n, cudaMemcpyKind k) { (void)k; return memcpy_impl(true, d, s, n); }

static cudaError_t memcpy_async_impl(bool pt, void* dst, const void* src, size_t n, cudaStream_t s) {
  return CALL(pt, cuMemcpyAsync, MemcpyAsyncFn, CU(dst), CU(src), n, ST(s));
}
RT_API cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st) { (void)k; return memcpy_async_impl(false, d, s, n, st); }
RT_API cudaError_t cudaMemcpyAsync_ptsz(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st) { (void)k; return memcpy_async_impl(true, d, s, n, st); }

RT_API cudaError_t cudaMemset(void* d, int v, size_t n) { return CALL(false, cuMemsetD8, MemsetFn, CU(d), static_cast<unsigned char>(v), n); }
RT_API cudaError_t cudaMemset_ptds(void* d, int v, size_t n) { return CALL(true, cuMemsetD8, MemsetFn, CU(d), static_cast<unsigned char>(v), n); }
RT_API cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t s) { return CALL(false, cuMemsetD8Async, MemsetAsyncFn, CU(d), static_cast<unsigned char>(v), n, ST(s)); }
RT_API cudaError_t cudaMemsetAsync_ptsz(void* d, int v, size_t n, cudaStream_t s) { return CALL(true, cuMemsetD8Async, MemsetAsyncFn, CU(d), static_cast<unsigned char>(v), n, ST(s)); }

RT_API cudaError_t cudaStreamSynchronize(cudaStream_t s) { return CALL(false, cuStreamSynchronize, StreamFn, ST(s)); }
RT_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return CALL(true, cuStreamSynchronize, StreamFn, ST(s)); }
RT_API cudaError_t cudaStreamQuery(cudaStream_t s) {
  cudaError_t e = ready();
  if (e != cudaSuccess) return record(e);
  CUresult r = drv<StreamFn>(&Driver::cuStreamQuery, false)(ST(s));
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : record(to_runtime(r));
}
RT_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  cudaError_t e = ready();
  if (e != cudaSuccess) return record(e);
  CUresult r = drv<StreamFn>(&Driver::cuStreamQuery, true)(ST(s));
  return r == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : record(to_runtime(r));
}
RT_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return CALL(false, cuEventRecord, EventRecordFn, reinterpret_cast<CUevent>(e), ST(s)); }
RT_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) { return CALL(true, cuEventRecord, EventRecordFn, reinterpret_cast<CUevent>(e), ST(s)); }
RT_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { return CALL(false, cuStreamWaitEvent, WaitEventFn, ST(s), reinterpret_cast<CUevent>(e), f); }
RT_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned f) { return CALL(true, cuStreamWaitEvent, WaitEventFn, ST(s), reinterpret_cast<CUevent>(e), f); }
RT_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m) { return CALL(false, cuStreamBeginCapture, BeginCaptureFn, ST(s), static_cast<CUstreamCaptureMode>(m)); }
RT_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode m) { return CALL(true, cuStreamBeginCapture, BeginCaptureFn, ST(s), static_cast<CUstreamCaptureMode>(m)); }
RT_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) { return CALL(false, cuStreamEndCapture, EndCaptureFn, ST(s), reinterpret_cast<CUgraph*>(g)); }
RT_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* g) { return CALL(true, cuStreamEndCapture, EndCaptureFn, ST(s), reinterpret_cast<CUgraph*>(g)); }
RT_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) { return CALL(false, cuStreamIsCapturing, IsCapturingFn, ST(s), reinterpret_cast<CUstreamCaptureStatus*>(st)); }
RT_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* st) { return CALL(true, cuStreamIsCapturing, IsCapturingFn, ST(s), reinterpret_cast<CUstreamCaptureStatus*>(st)); }
RT_API cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) { return CALL(false, cuGraphLaunch, GraphLaunchFn, reinterpret_cast<CUgraphExec>(g), ST(s)); }
RT_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t g, cudaStream_t s) { return CALL(true, cuGraphLaunch, GraphLaunchFn, reinterpret_cast<CUgraphExec>(g), ST(s)); }
RT_API cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t s) { return CALL(false, cuMemAllocAsync, AllocAsyncFn, reinterpret_cast<CUdeviceptr*>(p), n, ST(s)); }
RT_API cudaError_t cudaMallocAsync_ptsz(void** p, size_t n, cudaStream_t s) { return CALL(true, cuMemAllocAsync, AllocAsyncFn, reinterpret_cast<CUdeviceptr*>(p), n, ST(s)); }
RT_API cudaError_t cudaFreeAsync(void* p, cudaStream_t s) { return CALL(false, cuMemFreeAsync, FreeAsyncFn, CU(p), ST(s)); }
RT_API cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s) { return CALL(true, cuMemFreeAsync, FreeAsyncFn, CU(p), ST(s)); }
RT_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t f, void* d) { return CALL(false, cuLaunchHostFunc, HostFuncFn, ST(s), f, d); }
RT_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t f, void* d) { return CALL(true, cuLaunchHostFunc, HostFuncFn, ST(s), f, d); }

// ---- calls without a stream ----
RT_API cudaError_t cudaMalloc(void** p, size_t n) {
  if (!p) return record(cudaErrorInvalidValue);
  return CALL(false, cuMemAlloc, CUresult (*)(CUdeviceptr*, size_t), reinterpret_cast<CUdeviceptr*>(p), n);
}
RT_API cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  return CALL(false, cuMemFree, CUresult (*)(CUdeviceptr), CU(p));
}
RT_API cudaError_t cudaMallocHost(void** p, size_t n) { return CALL(false, cuMemAllocHost, CUresult (*)(void**, size_t), p, n); }
RT_API cudaError_t cudaFreeHost(void* p) { return CALL(false, cuMemFreeHost, CUresult (*)(void*), p); }
RT_API cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { return CALL(false, cuMemGetInfo, CUresult (*)(size_t*, size_t*), f, t); }
RT_API cudaError_t cudaDeviceSynchronize() { return CALL(false, cuCtxSynchronize, CUresult (*)()); }
RT_API cudaError_t cudaStreamCreate(cudaStream_t* s) { return CALL(false, cuStreamCreate, CUresult (*)(CUstream*, unsigned), reinterpret_cast<CUstream*>(s), 0u); }
RT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned f) { return CALL(false, cuStreamCreate, CUresult (*)(CUstream*, unsigned), reinterpret_cast<CUstream*>(s), f); }
RT_API cudaError_t cudaStreamDestroy(cudaStream_t s) { return CALL(false, cuStreamDestroy, StreamFn, ST(s)); }
RT_API cudaError_t cudaEventCreate(cudaEvent_t* e) { return CALL(false, cuEventCreate, CUresult (*)(CUevent*, unsigned), reinterpret_cast<CUevent*>(e), 0u); }
RT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned f) { return CALL(false, cuEventCreate, CUresult (*)(CUevent*, unsigned), reinterpret_cast<CUevent*>(e), f); }
RT_API cudaError_t cudaEventDestroy(cudaEvent_t e) { return CALL(false, cuEventDestroy, CUresult (*)(CUevent), reinterpret_cast<CUevent>(e)); }
RT_API cudaError_t cudaEventSynchronize(cudaEvent_t e) { return CALL(false, cuEventSynchronize, CUresult (*)(CUevent), reinterpret_cast<CUevent>(e)); }
RT_API cudaError_t cudaEventQuery(cudaEvent_t e) {
  cudaError_t r = ready();
  if (r != cudaSuccess) return record(r);
  CUresult q = drv<CUresult (*)(CUevent)>(&Driver::cuEventQuery, false)(reinterpret_cast<CUevent>(e));
  return q == CUDA_ERROR_NOT_READY ? cudaErrorNotReady : record(to_runtime(q));
}
RT_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  return CALL(false, cuEventElapsedTime, CUresult (*)(float*, CUevent, CUevent), ms, reinterpret_cast<CUevent>(a), reinterpret_cast<CUevent>(b));
}
RT_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long f) {
  return CALL(false, cuGraphInstantiate, CUresult (*)(CUgraphExec*, CUgraph, unsigned long long), reinterpret_cast<CUgraphExec*>(e), reinterpret_cast<CUgraph>(g), f);
}
RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { return CALL(false, cuGraphExecDestroy, CUresult (*)(CUgraphExec), reinterpret_cast<CUgraphExec>(e)); }
RT_API cudaError_t cudaGraphDestroy(cudaGraph_t g) { return CALL(false, cuGraphDestroy, CUresult (*)(CUgraph), reinterpret_cast<CUgraph>(g)); }

RT_API cudaError_t cudaGetDeviceCount(int* n) { return CALL(false, cuDeviceGetCount, CUresult (*)(int*), n); }
RT_API cudaError_t cudaGetDevice(int* d) {
  if (!d) return record(cudaErrorInvalidValue);
  *d = t_device;
  return cudaSuccess;
}
RT_API cudaError_t cudaSetDevice(int d) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return e;
  if (d < 0 || d >= n) return record(cudaErrorInvalidDevice);
  if (d != t_device) t_context_set = false;
  t_device = d;
  return ready();
}
RT_API cudaError_t cudaDeviceReset() { return cudaDeviceSynchronize(); }
RT_API cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  return CALL(false, cuDeviceGetAttribute, CUresult (*)(int*, int, CUdevice), v, static_cast<int>(a), d);
}
RT_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (!p) return record(cudaErrorInvalidValue);
  std::memset(p, 0, sizeof *p);
  cudaError_t e = CALL(false, cuDeviceGetName, CUresult (*)(char*, int, CUdevice), p->name, static_cast<int>(sizeof p->name), d);
  if (e != cudaSuccess) return e;
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    drv<CUresult (*)(int*, int, CUdevice)>(&Driver::cuDeviceGetAttribute, false)(&v, a, d);
    return v;
  };
  drv<CUresult (*)(size_t*, CUdevice)>(&Driver::cuDeviceTotalMem, false)(&p->totalGlobalMem, d);
  p->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p->sharedMemPerBlock = static_cast<size_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  p->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  return cudaSuccess;
}
RT_API cudaError_t cudaDriverGetVersion(int* v) {
  std::call_once(g_once, load_driver);
  if (!v) return record(cudaErrorInvalidValue);
  auto f = drv<CUresult (*)(int*)>(&Driver::cuDriverGetVersion, false);
  if (!f) {
    *v = 0;
    return cudaSuccess;
  }
  return record(to_runtime(f(v)));
}
RT_API cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return record(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}
RT_API cudaError_t cudaGetLastError() {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
RT_API cudaError_t cudaPeekAtLastError() { return t_last_error; }
RT_API const char* cudaGetErrorName(cudaError_t e) {
  static thread_local char buf[48];
  if (e == cudaSuccess) return "cudaSuccess";
  std::snprintf(buf, sizeof buf, "cudaError_%d", static_cast<int>(e));
  return buf;
}
RT_API const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorNotSupported: return "operation not supported";
    default: return cudaGetErrorName(e);
  }
}
