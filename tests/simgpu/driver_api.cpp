// Driver-API checks of the simulated driver, built against NVIDIA's cuda.h and stub libcuda
// and run with the simulator on LD_LIBRARY_PATH.
// Usage: simgpu_driver_api CUBIN PTX FATBIN CHECK
//   CHECK: images | procaddr | launch | streams | memory | graph | threads | fork | fork_busy |
//          device | slice | mps
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "check.h"

namespace {

const char *g_cubin, *g_ptx, *g_fatbin;

std::string read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  CHECK(f);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* symbol_of(const void* p) {
  Dl_info info{};
  return dladdr(p, &info) && info.dli_sname ? info.dli_sname : "?";
}

CUfunction spin() {
  static CUfunction f = load_kernel(g_fatbin, "spin_kernel");
  return f;
}

void launch_spin(unsigned long long ns, CUstream s, unsigned grid = 1) {
  void* params[] = {&ns};
  CK(cuLaunchKernel(spin(), grid, 1, 1, 128, 1, 1, 0, s, params, nullptr));
}

void check_images() {
  use_primary_context();
  CUmodule cubin, ptx, fatbin;
  CK(cuModuleLoad(&cubin, g_cubin));
  std::string ptx_text = read_file(g_ptx);
  CK(cuModuleLoadData(&ptx, ptx_text.c_str()));
  std::string fatbin_bytes = read_file(g_fatbin);
  CK(cuModuleLoadFatBinary(&fatbin, fatbin_bytes.data()));
  for (CUmodule m : {cubin, ptx, fatbin}) {
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "spin_kernel"));
    CK(cuModuleGetFunction(&f, m, "_Z5scalePffi"));
    const char* name = nullptr;
    CK(cuFuncGetName(&name, f));
    CHECK(std::string(name) == "_Z5scalePffi");
    CHECK(cuModuleGetFunction(&f, m, "no_such_kernel") == CUDA_ERROR_NOT_FOUND);
    CHECK(cuModuleGetFunction(&f, m, "scale") == CUDA_ERROR_NOT_FOUND);  // only the mangled name exists
    CUdeviceptr p;
    size_t bytes = 0;
    CK(cuModuleGetGlobal(&p, &bytes, m, "sim_counter"));
    CHECK(bytes == 4);
    CK(cuModuleGetGlobal(&p, &bytes, m, "sim_coefficients"));
    CHECK(bytes == 32);
    CHECK(cuModuleGetGlobal(&p, &bytes, m, "no_such_global") == CUDA_ERROR_NOT_FOUND);
  }
  CUfunction helper;  // a __device__ function is not a kernel
  CHECK(cuModuleGetFunction(&helper, cubin, "_Z12not_a_kernelf") == CUDA_ERROR_NOT_FOUND);
  CUdeviceptr counter;
  CK(cuModuleGetGlobal(&counter, nullptr, cubin, "sim_counter"));
  int v = 0;
  CK(cuMemcpyDtoH(&v, counter, 4));
  CHECK(v == 42);  // initialised from the image
  CHECK(cuModuleLoadData(&ptx, "not an image") == CUDA_ERROR_INVALID_IMAGE);

  // Libraries: CUkernel handles are accepted wherever a CUfunction is.
  CUlibrary lib, lib_ptx;
  CK(cuLibraryLoadFromFile(&lib, g_fatbin, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CK(cuLibraryLoadData(&lib_ptx, ptx_text.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k;
  CHECK(cuLibraryGetKernel(&k, lib, "nope") == CUDA_ERROR_NOT_FOUND);
  CK(cuLibraryGetKernel(&k, lib, "ncclDevKernel_AllReduce_Sum_f32_spin"));
  const char* name = nullptr;
  CK(cuKernelGetName(&name, k));
  CHECK(std::string(name) == "ncclDevKernel_AllReduce_Sum_f32_spin");
  CUfunction f;
  CK(cuKernelGetFunction(&f, k));
  CK(cuFuncGetName(&name, f));
  CHECK(std::string(name) == "ncclDevKernel_AllReduce_Sum_f32_spin");
  unsigned long long ns = 1000;
  void* params[] = {&ns};
  CK(cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  CK(cuCtxSynchronize());
  CUmodule from_lib;
  CK(cuLibraryGetModule(&from_lib, lib));
  CK(cuModuleGetFunction(&f, from_lib, "spin_kernel"));
  int threads = 0;
  CK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  CHECK(threads == 1024);
  CK(cuLibraryUnload(lib));
  CK(cuLibraryUnload(lib_ptx));
}

void check_procaddr() {
  CK(cuInit(0));
  struct Case {
    const char* api;
    int version;
    cuuint64_t flags;
    const char* symbol;
  } cases[] = {
      {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_DEFAULT, "cuLaunchKernel"},
      {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
      {"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
      {"cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoDAsync_v2_ptsz"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
      {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
      {"cuStreamGetCaptureInfo", 12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamGetCaptureInfo_v3_ptsz"},
      {"cuStreamGetCaptureInfo", 11030, 0, "cuStreamGetCaptureInfo_v2"},
      {"cuGraphInstantiate", 12000, 0, "cuGraphInstantiateWithFlags"},
      {"cuGraphInstantiate", 11000, 0, "cuGraphInstantiate_v2"},
      {"cuGraphLaunch", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuGraphLaunch_ptsz"},
      {"cuEventElapsedTime", 13000, 0, "cuEventElapsedTime_v2"},
      {"cuDeviceTotalMem", 13000, 0, "cuDeviceTotalMem_v2"},
      {"cuInit", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuInit"},
  };
  for (const Case& c : cases) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CK(cuGetProcAddress(c.api, &fn, c.version, c.flags, &status));
    CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS && fn);
    if (std::strcmp(symbol_of(fn), c.symbol) != 0) {
      std::fprintf(stderr, "FAIL %s v%d flags %llu -> %s, want %s\n", c.api, c.version,
                   static_cast<unsigned long long>(c.flags), symbol_of(fn), c.symbol);
      std::exit(1);
    }
  }
  void* fn = &fn;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  // As the real driver answers (H200, driver 580): success, a null pointer and the status.
  CHECK(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == nullptr && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  fn = &fn;
  CHECK(cuGetProcAddress("cuGraphCreate", &fn, 9000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == nullptr && status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  // A known entry point the simulator does not implement answers CUDA_ERROR_NOT_SUPPORTED.
  CK(cuGetProcAddress("cuTexObjectCreate", &fn, 13000, 0, &status));
  CHECK(std::strcmp(symbol_of(fn), "cuTexObjectCreate") == 0);
  CUtexObject tex;
  CHECK(reinterpret_cast<CUresult (*)(CUtexObject*, const CUDA_RESOURCE_DESC*, const CUDA_TEXTURE_DESC*,
                                      const CUDA_RESOURCE_VIEW_DESC*)>(fn)(&tex, nullptr, nullptr, nullptr) ==
        CUDA_ERROR_NOT_SUPPORTED);
}

void check_launch() {
  CUfunction f = spin();
  unsigned long long ns = 3000000;
  // Arguments through `extra`.
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns, CU_LAUNCH_PARAM_BUFFER_SIZE, nullptr, CU_LAUNCH_PARAM_END};
  size_t size = sizeof ns;
  extra[3] = &size;
  auto t0 = std::chrono::steady_clock::now();
  CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra));
  CK(cuCtxSynchronize());
  double t = seconds_since(t0);
  std::printf("3 ms spin through extra: %.3f ms\n", t * 1e3);
  CHECK(t > 0.0029 && t < 0.030);  // lower bound: the spin ran; upper: sane even on a loaded machine
  // cuLaunchKernelEx, cooperative through an attribute, and cuLaunchCooperativeKernel.
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 64;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  ns = 1000;
  void* params[] = {&ns};
  CK(cuLaunchKernelEx(&cfg, f, params, nullptr));
  CK(cuLaunchCooperativeKernel(f, 2, 1, 1, 32, 1, 1, 0, nullptr, params));
  // Host functions run in stream order, after the kernel before them.
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  static std::atomic<int> order{0};
  static int seen_at = -1;
  launch_spin(2000000, s);
  CK(cuLaunchHostFunc(s, [](void*) { seen_at = order.fetch_add(1); }, nullptr));
  CK(cuStreamSynchronize(s));
  CHECK(seen_at == 0);
  // The per-thread default stream through its own entry point.
  void* ptsz = nullptr;
  CK(cuGetProcAddress("cuLaunchKernel", &ptsz, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  auto launch_ptsz = reinterpret_cast<decltype(&cuLaunchKernel)>(ptsz);
  CK(launch_ptsz(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  CK(launch_ptsz(f, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, params, nullptr));
  CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  // Invalid launches.
  CHECK(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuLaunchKernel(reinterpret_cast<CUfunction>(&ns), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) ==
        CUDA_ERROR_INVALID_HANDLE);
  CK(cuCtxSynchronize());
}

void check_streams() {
  spin();
  CUstream blocking, nonblocking, prio;
  CK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  CK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
  int least, greatest, p = 0;
  CK(cuCtxGetStreamPriorityRange(&least, &greatest));
  CK(cuStreamCreateWithPriority(&prio, CU_STREAM_NON_BLOCKING, greatest));
  CK(cuStreamGetPriority(prio, &p));
  CHECK(p == greatest);
  // Events time the stream; a DISABLE_TIMING event cannot be timed.
  CUevent a, b, untimed;
  CK(cuEventCreate(&a, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&b, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  CK(cuEventRecord(a, nonblocking));
  launch_spin(5000000, nonblocking);
  CK(cuEventRecord(b, nonblocking));
  CK(cuEventRecord(untimed, nonblocking));
  CHECK(cuEventQuery(b) == CUDA_ERROR_NOT_READY);
  CHECK(cuStreamQuery(nonblocking) == CUDA_ERROR_NOT_READY);
  CK(cuEventSynchronize(b));
  CK(cuEventQuery(b));
  float ms = 0;
  CK(cuEventElapsedTime(&ms, a, b));
  std::printf("5 ms spin timed by events: %.3f ms\n", ms);
  CHECK(ms > 4.9f && ms < 30.0f);  // load can only lengthen it
  CHECK(cuEventElapsedTime(&ms, a, untimed) == CUDA_ERROR_INVALID_HANDLE);
  // A stream waits for an event of another.
  launch_spin(5000000, nonblocking);
  CK(cuEventRecord(b, nonblocking));
  CK(cuStreamWaitEvent(prio, b, 0));
  CK(cuEventRecord(a, prio));
  CK(cuEventSynchronize(a));
  CK(cuEventQuery(b));
  // The legacy stream waits for blocking streams, a non-blocking stream does not wait for it.
  // 50 ms, so that 40 ms of scheduling noise still tells waiting from not waiting.
  launch_spin(50000000, blocking);
  auto t0 = std::chrono::steady_clock::now();
  CK(cuMemsetD8Async(0, 0, 0, nonblocking));  // empty: returns at once
  launch_spin(1000, nonblocking);
  CK(cuStreamSynchronize(nonblocking));
  CHECK(seconds_since(t0) < 0.040);
  launch_spin(1000, nullptr);  // queued behind the blocking stream's 50 ms
  CK(cuStreamSynchronize(nullptr));
  CHECK(seconds_since(t0) > 0.048);
  CK(cuEventDestroy(a));
  CK(cuEventDestroy(b));
  CK(cuEventDestroy(untimed));
  CK(cuStreamDestroy(blocking));
  CK(cuStreamDestroy(nonblocking));
  CK(cuStreamDestroy(prio));
}

void check_memory() {
  use_primary_context();
  CUdeviceptr d, d2;
  CK(cuMemAlloc(&d, 1 << 20));
  CK(cuMemAlloc(&d2, 1 << 20));
  CHECK(cuMemFree(d + 16) == CUDA_ERROR_INVALID_VALUE);
  CK(cuMemsetD32(d, 0x01020304, 1 << 18));
  CK(cuMemcpyDtoD(d2, d, 1 << 20));
  unsigned v = 0;
  CK(cuMemcpyDtoH(&v, d2 + 4096, 4));
  CHECK(v == 0x01020304);
  CK(cuMemsetD16(d2, 0xabcd, 2));
  unsigned short h = 0;
  CK(cuMemcpyDtoH(&h, d2 + 2, 2));
  CHECK(h == 0xabcd);
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::vector<unsigned char> host(4096, 7), back(4096);
  CK(cuMemcpyHtoDAsync(d, host.data(), host.size(), s));
  CK(cuMemsetD8Async(d + 100, 9, 1, s));
  CK(cuMemcpyDtoHAsync(back.data(), d, back.size(), s));
  CK(cuStreamSynchronize(s));
  CHECK(back[99] == 7 && back[100] == 9 && back[101] == 7);
  CUmemorytype type;
  CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CUdeviceptr base;
  size_t size;
  CK(cuMemGetAddressRange(&base, &size, d + 10));
  CHECK(base == d && size == (1 << 20));
  size_t pitch;
  CUdeviceptr pitched;
  CK(cuMemAllocPitch(&pitched, &pitch, 1000, 10, 4));
  CHECK(pitch >= 1000);
  void *pinned, *mapped;
  CK(cuMemAllocHost(&pinned, 4096));
  CK(cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_PORTABLE));
  CK(cuMemFreeHost(pinned));
  CK(cuMemFreeHost(mapped));
  CUdeviceptr managed, async_p, pool_p;
  CK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAllocAsync(&async_p, 4096, s));
  CUmemoryPool pool;
  CK(cuDeviceGetDefaultMemPool(&pool, 0));
  CK(cuMemAllocFromPoolAsync(&pool_p, 4096, pool, s));
  CK(cuMemFreeAsync(async_p, s));
  CK(cuMemFreeAsync(pool_p, s));
  CK(cuStreamSynchronize(s));
  size_t free_b, total;
  CK(cuMemGetInfo(&free_b, &total));
  CHECK(total == 80ull << 30 && free_b < total);
  CUdeviceptr huge;
  CHECK(cuMemAlloc(&huge, 81ull << 30) == CUDA_ERROR_OUT_OF_MEMORY);
  CK(cuMemFree(managed));
  CK(cuMemFree(pitched));
  CK(cuMemFree(d));
  CK(cuMemFree(d2));
  CHECK(cuMemFree(d) == CUDA_ERROR_INVALID_VALUE);  // double free
}

void check_graph() {
  CUfunction f = spin();
  CUgraph g, child;
  CK(cuGraphCreate(&g, 0));
  CK(cuGraphCreate(&child, 0));
  unsigned long long ns = 2000000;
  void* params[] = {&ns};
  CUDA_KERNEL_NODE_PARAMS kp{};
  kp.func = f;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = params;
  CUgraphNode k1, k2, c;
  CK(cuGraphAddKernelNode(&k1, g, nullptr, 0, &kp));
  CK(cuGraphAddKernelNode(&k2, child, nullptr, 0, &kp));
  CK(cuGraphAddChildGraphNode(&c, g, &k1, 1, child));
  size_t n = 0;
  CK(cuGraphGetNodes(g, nullptr, &n));
  CHECK(n == 2);
  CUgraphNodeType type;
  CK(cuGraphNodeGetType(c, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_GRAPH);
  CUgraph inner;  // the child graph is cloned into the node
  CK(cuGraphChildGraphNodeGetGraph(c, &inner));
  CK(cuGraphGetNodes(inner, nullptr, &n));
  CHECK(n == 1);
  CUgraphExec exec;
  CK(cuGraphInstantiateWithFlags(&exec, g, 0));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto t0 = std::chrono::steady_clock::now();
  CK(cuGraphLaunch(exec, s));
  CK(cuStreamSynchronize(s));
  double t = seconds_since(t0);
  CHECK(t > 0.0039 && t < 0.040);  // two 2 ms kernels, in order (an upper bound only for sanity)
  CK(cuGraphExecDestroy(exec));
  // Capture records launches, copies and memsets; the graph replays them.
  CUdeviceptr d;
  CK(cuMemAlloc(&d, 64));
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUstreamCaptureStatus status;
  cuuint64_t id = 0;
  CK(cuStreamGetCaptureInfo(s, &status, &id, nullptr, nullptr, nullptr, nullptr));
  CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0);
  launch_spin(1000000, s);
  CK(cuMemsetD32Async(d, 5, 16, s));
  CUgraph captured;
  CK(cuStreamEndCapture(s, &captured));
  CK(cuStreamIsCapturing(s, &status));
  CHECK(status == CU_STREAM_CAPTURE_STATUS_NONE);
  unsigned v = 0;
  CK(cuMemcpyDtoH(&v, d, 4));
  CHECK(v == 0);  // recorded, not run
  CK(cuGraphGetNodes(captured, nullptr, &n));
  CHECK(n == 2);
  CK(cuGraphInstantiate(&exec, captured, 0));
  CK(cuGraphLaunch(exec, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemcpyDtoH(&v, d, 4));
  CHECK(v == 5);
  CK(cuGraphExecDestroy(exec));
  // Capture into a graph of the caller's own may end without asking for it back (a null graph
  // pointer, as NVIDIA's graphConditionalNodes sample does); a plain capture may not.
  CUgraph own;
  CK(cuGraphCreate(&own, 0));
  CK(cuStreamBeginCaptureToGraph(s, own, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CK(cuMemsetD32Async(d, 9, 16, s));
  CK(cuStreamEndCapture(s, nullptr));
  CK(cuGraphInstantiate(&exec, own, 0));
  CK(cuGraphLaunch(exec, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemcpyDtoH(&v, d, 4));
  CHECK(v == 9);
  CK(cuGraphExecDestroy(exec));
  CK(cuGraphDestroy(own));
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK(cuStreamEndCapture(s, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CUgraph plain;
  CK(cuStreamEndCapture(s, &plain));  // the capture goes on until ended properly
  CK(cuGraphDestroy(plain));
  CK(cuGraphDestroy(captured));
  CK(cuGraphDestroy(g));
}

// Eight threads launching and copying at once, each on its own stream and on its per-thread
// default stream.
void check_threads() {
  spin();
  void* ptsz = nullptr;
  CK(cuGetProcAddress("cuLaunchKernel", &ptsz, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  auto launch_ptsz = reinterpret_cast<decltype(&cuLaunchKernel)>(ptsz);
  CUcontext ctx;
  CK(cuCtxGetCurrent(&ctx));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) ++failures;
      CUstream s;
      CUdeviceptr d;
      if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) || cuMemAlloc(&d, 4096)) {
        ++failures;
        return;
      }
      unsigned long long ns = 20000;
      void* params[] = {&ns};
      for (int i = 0; i < 100; ++i) {
        if (cuLaunchKernel(spin(), 4, 1, 1, 64, 1, 1, 0, s, params, nullptr)) ++failures;
        if (launch_ptsz(spin(), 1, 1, 1, 64, 1, 1, 0, nullptr, params, nullptr)) ++failures;
        if (cuMemsetD32Async(d, static_cast<unsigned>(t * 1000 + i), 1024, s)) ++failures;
      }
      unsigned v = 0;
      if (cuStreamSynchronize(s) || cuMemcpyDtoH(&v, d, 4) || v != static_cast<unsigned>(t * 1000 + 99)) ++failures;
      if (cuStreamSynchronize(CU_STREAM_PER_THREAD) || cuStreamDestroy(s) || cuMemFree(d)) ++failures;
    });
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
}

// A child of a process that used the simulator can use it too.
void check_fork() {
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  launch_spin(1000000, s);
  launch_spin(1000000, nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 64));
    CK(cuMemsetD8(d, 3, 64));
    launch_spin(1000000, s);
    launch_spin(1000000, nullptr);
    CK(cuStreamSynchronize(s));
    CK(cuCtxSynchronize());
    unsigned char c = 0;
    CK(cuMemcpyDtoH(&c, d + 63, 1));
    _exit(c == 3 ? 0 : 2);
  }
  CK(cuCtxSynchronize());
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  launch_spin(1000, s);
  CK(cuStreamSynchronize(s));
}

// Forks while another thread keeps the simulator busy: allocating and freeing (the allocation
// table's lock is held across an mmap), and queueing kernels on a blocking stream (the fork
// catches work in flight there). Each child must use the driver at once and exit: no lock the
// other thread held and no work the parent queued may hold it up.
void check_fork_busy() {
  use_primary_context();
  // The kernel is loaded here, before any fork: a child forked while the busy thread ran
  // spin()'s first call would wait forever on its static's initialization guard (the test's
  // own lock, held by a thread the child does not have; seen under load, 1 child in ~30 runs).
  spin();
  CUcontext ctx = nullptr;
  CK(cuCtxGetCurrent(&ctx));
  CUstream blocking;
  CK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    CK(cuCtxSetCurrent(ctx));
    while (!stop.load()) {
      CUdeviceptr d;
      CK(cuMemAlloc(&d, 1 << 20));
      CK(cuMemFree(d));
      launch_spin(200000, blocking);
      size_t free_bytes = 0, total = 0;
      CK(cuMemGetInfo(&free_bytes, &total));
    }
  });
  int hung = 0;
  int forks = 0;
  for (int i = 0; i < 60 && !hung; ++i, ++forks) {
    std::this_thread::sleep_for(std::chrono::microseconds(300 + 97 * (i % 7)));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      CUdeviceptr d;
      CK(cuMemAlloc(&d, 4096));
      launch_spin(1000, nullptr);
      CK(cuCtxSynchronize());
      CK(cuMemFree(d));
      _exit(0);
    }
    int status = -1;
    auto t0 = std::chrono::steady_clock::now();
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (seconds_since(t0) > 5) {  // bounded by time, not by a count of sleeps
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ++hung;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  stop.store(true);
  busy.join();
  std::printf("fork_busy: %d of %d children hung\n", hung, forks);
  CHECK(hung == 0);
}

void check_device() {
  CK(cuInit(0));
  int count = 0, v = 0, driver = 0;
  CK(cuDriverGetVersion(&driver));
  CHECK(driver == 13000);
  CK(cuDeviceGetCount(&count));
  const char* want = std::getenv("SIMGPU_DEVICES");
  CHECK(count == (want ? std::atoi(want) : 1));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CHECK(cuDeviceGet(&dev, count) == CUDA_ERROR_INVALID_DEVICE);
  char name[128];
  CK(cuDeviceGetName(name, sizeof name, dev));
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CHECK(v == 132);
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CHECK(v == 9);
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
  CHECK(v == 1);
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  CHECK(v == 1);
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, dev));
  CHECK(total == 80ull << 30);
  CUuuid u0, u1;
  CK(cuDeviceGetUuid(&u0, dev));
  if (count > 1) {
    CK(cuDeviceGetUuid(&u1, 1));
    CHECK(std::memcmp(&u0, &u1, sizeof u0) != 0);
  }
  // Primary context and created contexts.
  CUcontext primary, created, popped, current;
  unsigned flags = 0;
  int active = 1;
  CK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
  CK(cuDevicePrimaryCtxRetain(&primary, dev));
  CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  CHECK(active == 1 && (flags & CU_CTX_SCHED_BLOCKING_SYNC));
  CK(cuCtxPushCurrent(primary));
  CK(cuCtxCreate(&created, nullptr, 0, dev));
  CK(cuCtxGetCurrent(&current));
  CHECK(current == created);
  CUdevice d2 = -1;
  CK(cuCtxGetDevice(&d2));
  CHECK(d2 == dev);
  CK(cuCtxSynchronize());
  CK(cuCtxPopCurrent(&popped));
  CHECK(popped == created);
  CK(cuCtxGetCurrent(&current));
  CHECK(current == primary);
  CK(cuCtxDestroy(created));
  CK(cuDevicePrimaryCtxRelease(dev));
  const char* s = nullptr;
  CK(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, &s));
  CHECK(std::strcmp(s, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT") == 0);
  CK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  CHECK(s && *s);
}

// Two processes sharing one GPU: `kernels` spin kernels of `ms` each, with grids of `grid`
// blocks; returns (alone, together) seconds of this process.
std::pair<double, double> contend(int kernels, double ms, unsigned grid) {
  auto run = [&] {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kernels; ++i) launch_spin(static_cast<unsigned long long>(ms * 1e6), nullptr, grid);
    CK(cuCtxSynchronize());
    return seconds_since(t0);
  };
  spin();
  double alone = run();
  int go[2], done[2];
  CHECK(pipe(go) == 0 && pipe(done) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    char c;
    CHECK(read(go[0], &c, 1) == 1);
    double t = run();
    CHECK(write(done[1], &t, sizeof t) == sizeof t);
    _exit(0);
  }
  CHECK(write(go[1], "x", 1) == 1);
  double mine = run(), theirs = 0;
  CHECK(read(done[0], &theirs, sizeof theirs) == sizeof theirs);
  waitpid(pid, nullptr, 0);
  return {alone, std::min(mine, theirs)};
}

// contend() three times, each figure the best of the three: load from other work on the
// machine only ever adds time, so the minimum is the closest to the model's answer.
std::pair<double, double> contend_best(int kernels, double ms, unsigned grid) {
  std::pair<double, double> best{1e9, 1e9};
  for (int round = 0; round < 3; ++round) {
    auto [alone, together] = contend(kernels, ms, grid);
    best = {std::min(best.first, alone), std::min(best.second, together)};
  }
  return best;
}

// Under MPS, blocks are placed in the order kernels reach the GPU: a one-wave kernel of this
// process, launched while another process's ten-wave kernel places its blocks, starts only once
// that kernel's last wave has begun. Run with SIMGPU_SHARING=mps and SIMGPU_NS_PER_WAVE=1 ms.
// How long a one-wave kernel of this process takes behind another process's ten-wave kernel
// that reached the GPU first, that process's MPS client priority `other_priority`; and alone.
std::pair<double, double> small_kernel_behind_other(const char* other_priority) {
  use_primary_context();
  CUmodule m;
  CUfunction scale;
  CK(cuModuleLoad(&m, g_fatbin));
  CK(cuModuleGetFunction(&scale, m, "_Z5scalePffi"));
  auto launch = [&](unsigned grid) {
    CUdeviceptr p = 0;
    float a = 1.0f;
    int n = 0;
    void* params[] = {&p, &a, &n};
    CK(cuLaunchKernel(scale, grid, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  };
  auto small_kernel_s = [&] {
    auto t0 = std::chrono::steady_clock::now();
    launch(16);
    CK(cuCtxSynchronize());
    return seconds_since(t0);
  };
  small_kernel_s();  // warm
  double alone = small_kernel_s();
  int go[2], launched[2];
  CHECK(pipe(go) == 0 && pipe(launched) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("CUDA_MPS_CLIENT_PRIORITY", other_priority, 1);  // read at the child's first kernel
    char c;
    CHECK(read(go[0], &c, 1) == 1);
    launch(10 * 132);  // ten waves of 1 ms on 132 SMs
    CHECK(write(launched[1], "x", 1) == 1);
    CK(cuCtxSynchronize());
    _exit(0);
  }
  char c;
  CHECK(write(go[1], "x", 1) == 1);
  CHECK(read(launched[0], &c, 1) == 1);
  usleep(1000);  // the big kernel has begun placing its blocks
  double behind = small_kernel_s();
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return {alone, behind};
}

// Same priority: blocks are placed in the order kernels reach the GPU.
void check_mps_order() {
  auto [alone, behind] = small_kernel_behind_other("0");
  std::printf("mps order: a one-wave kernel alone %.1f ms, behind another process's ten-wave kernel %.1f ms\n",
              alone * 1e3, behind * 1e3);
  CHECK(alone < 0.004);
  CHECK(behind > 0.006);  // waited for most of the nine waves it came behind (7-8 ms left of them)
}

// The other process below normal (CUDA_MPS_CLIENT_PRIORITY=1): this one's blocks go first.
void check_mps_priority() {
  auto [alone, behind] = small_kernel_behind_other("1");
  std::printf("mps priority: a one-wave kernel alone %.1f ms, behind a below-normal process's ten-wave kernel %.1f ms\n",
              alone * 1e3, behind * 1e3);
  CHECK(alone < 0.004);
  CHECK(behind < 0.0045);  // at most its own wave and a look of the other kernel's (1 ms)
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 5);
  g_cubin = argv[1];
  g_ptx = argv[2];
  g_fatbin = argv[3];
  std::string check = argv[4];
  if (check == "images") check_images();
  else if (check == "procaddr") check_procaddr();
  else if (check == "launch") check_launch();
  else if (check == "streams") check_streams();
  else if (check == "memory") check_memory();
  else if (check == "graph") check_graph();
  else if (check == "threads") check_threads();
  else if (check == "fork") check_fork();
  else if (check == "fork_busy") check_fork_busy();
  else if (check == "device") check_device();
  else if (check == "mps_order") check_mps_order();
  else if (check == "mps_priority") check_mps_priority();
  else if (check == "slice") {
    // One 10 ms kernel per process: time slicing preempts, so both take about twice as long.
    auto [alone, together] = contend_best(1, 10, 132);
    std::printf("timeslice: alone %.2f ms, the faster of two together %.2f ms (best of 3)\n", alone * 1e3,
                together * 1e3);
    CHECK(alone >= 0.0099 && together / alone > 1.5 && together / alone < 2.6);
  } else if (check == "mps") {
    // Run with SIMGPU_SHARING=mps: half-GPU kernels run side by side at full speed, full-GPU
    // kernels slow each other down in proportion.
    auto [alone_half, together_half] = contend_best(5, 4, 60);
    auto [alone_full, together_full] = contend_best(5, 4, 132);
    std::printf("mps: 60-block kernels %.1f -> %.1f ms, 132-block kernels %.1f -> %.1f ms\n", alone_half * 1e3,
                together_half * 1e3, alone_full * 1e3, together_full * 1e3);
    CHECK(together_half / alone_half < 1.3);
    CHECK(together_full / alone_full > 1.5 && together_full / alone_full < 2.6);
  } else {
    CHECK(!"unknown check");
  }
  std::printf("simgpu %s: ok\n", check.c_str());
  return 0;
}
