// Checks of the simulated driver's green contexts (no libtandem).
// Usage: simgpu_green FATBIN CHECK
//   api       the four steps and their documented errors: the device's SM resource (132 SMs,
//             groups of at least 8 in steps of 8), splits rounded up and their remainder, a
//             split's output not split again, descriptors of one split only, creation flags,
//             green streams (non-blocking required, priority clamped), cuStreamGetGreenCtx and
//             cuStreamGetCtx_v2, the converted context, shared memory, a destroyed green
//             context's streams
//   confined  a kernel on a green stream runs on its SMs only (132 blocks on 32 SMs: 4.1 x as
//             long), the primary context's streams on all; a graph's kernels run in the context
//             they were captured in: captured on a green stream, on its SMs wherever launched;
//             captured on a plain stream, on all SMs even launched on a green stream
//   mps       SIMGPU_SHARING=mps: a process's whole-GPU kernels on a 64-SM green stream leave
//             another process's 66-block kernels their speed, on all SMs they slow them
//   mps_limited  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50: green contexts are created, but their
//             kernels get the client's 66 SMs (cuda.h: "scaled up to the value of SMs used for
//             the MPS client")
#include <cuda.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.h"

static CUfunction g_spin;

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// n spin kernels of `ns` and `blocks` blocks on `s`, then a synchronization: seconds taken.
static double run_spins(CUstream s, int n, unsigned long long ns, unsigned blocks) {
  void* params[] = {&ns};
  double t0 = now_s();
  for (int i = 0; i < n; ++i) CK(cuLaunchKernel(g_spin, blocks, 1, 1, 128, 1, 1, 0, s, params, nullptr));
  CK(cuStreamSynchronize(s));
  return now_s() - t0;
}

static double best_of(int rounds, CUstream s, int n, unsigned long long ns, unsigned blocks) {
  double best = 1e9;
  for (int i = 0; i < rounds; ++i) best = std::min(best, run_spins(s, n, ns, blocks));
  return best;
}

// A green context of `sms` SMs (a multiple of 8) on device 0, the way PyTorch makes one.
static CUgreenCtx make_green(unsigned sms) {
  CUdevResource device{}, group{}, rest{};
  CK(cuDeviceGetDevResource(0, &device, CU_DEV_RESOURCE_TYPE_SM));
  unsigned n = 1;
  CK(cuDevSmResourceSplitByCount(&group, &n, &device, &rest, 0, sms));
  CHECK(n == 1 && group.sm.smCount == sms);
  CUdevResourceDesc desc;
  CK(cuDevResourceGenerateDesc(&desc, &group, 1));
  CUgreenCtx g;
  CK(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  return g;
}

static CUstream green_stream(CUgreenCtx g) {
  CUstream s;
  CK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, 0));
  return s;
}

// Three 2 ms whole-GPU kernels captured on `capture_on`, the graph launched on `launch_on`:
// the best of 3 replays, in seconds.
static double replay_graph(CUstream capture_on, CUstream launch_on) {
  CUgraph graph;
  CUgraphExec exec;
  unsigned long long ns = 2000000;
  void* params[] = {&ns};
  CK(cuStreamBeginCapture(capture_on, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 3; ++i) CK(cuLaunchKernel(g_spin, 132, 1, 1, 128, 1, 1, 0, capture_on, params, nullptr));
  CK(cuStreamEndCapture(capture_on, &graph));
  CK(cuGraphInstantiate(&exec, graph, 0));
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    double t0 = now_s();
    CK(cuGraphLaunch(exec, launch_on));
    CK(cuStreamSynchronize(launch_on));
    best = std::min(best, now_s() - t0);
  }
  CK(cuGraphExecDestroy(exec));
  CK(cuGraphDestroy(graph));
  return best;
}

static void check_api() {
  CUdevResource dev{};
  CHECK(cuDeviceGetDevResource(0, nullptr, CU_DEV_RESOURCE_TYPE_SM) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDeviceGetDevResource(7, &dev, CU_DEV_RESOURCE_TYPE_SM) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuDeviceGetDevResource(0, &dev, CU_DEV_RESOURCE_TYPE_INVALID) == CUDA_ERROR_INVALID_RESOURCE_TYPE);
  CK(cuDeviceGetDevResource(0, &dev, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(dev.type == CU_DEV_RESOURCE_TYPE_SM && dev.sm.smCount == 132);
  int mps = -1;
  CK(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0));
  CHECK(mps == 0);  // time slicing: not an MPS client
  CHECK(dev.sm.minSmPartitionSize == 8 && dev.sm.smCoscheduledAlignment == 8);

  // How many groups: 132 / 32 = 4; 30 is rounded up to 32, 0 to the minimum of 8.
  unsigned n = 0;
  CK(cuDevSmResourceSplitByCount(nullptr, &n, &dev, nullptr, 0, 32));
  CHECK(n == 4);
  CK(cuDevSmResourceSplitByCount(nullptr, &n, &dev, nullptr, 0, 0));
  CHECK(n == 16);
  CUdevResource groups[4]{}, rest{};
  n = 4;
  CK(cuDevSmResourceSplitByCount(groups, &n, &dev, &rest, 0, 30));
  CHECK(n == 4 && groups[0].sm.smCount == 32 && groups[3].sm.smCount == 32 && rest.sm.smCount == 4);
  n = 1;
  CUdevResource one{}, one_rest{};
  CK(cuDevSmResourceSplitByCount(&one, &n, &dev, &one_rest, 0, 64));
  CHECK(n == 1 && one.sm.smCount == 64 && one_rest.sm.smCount == 68);
  // Loose co-scheduling: steps of 2.
  CK(cuDevSmResourceSplitByCount(&one, &n, &dev, nullptr, CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 33));
  CHECK(one.sm.smCount == 34 && one.sm.smCoscheduledAlignment == 2);
  // The errors.
  CHECK(cuDevSmResourceSplitByCount(groups, nullptr, &dev, nullptr, 0, 8) == CUDA_ERROR_INVALID_VALUE);
  n = 1;
  CHECK(cuDevSmResourceSplitByCount(groups, &n, nullptr, nullptr, 0, 8) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDevSmResourceSplitByCount(groups, &n, &dev, nullptr, 0, 133) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDevSmResourceSplitByCount(groups, &n, &dev, nullptr, 0, 130) == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CHECK(cuDevSmResourceSplitByCount(groups, &n, &dev, nullptr, 0x100, 8) == CUDA_ERROR_INVALID_VALUE);
  n = 0;
  CHECK(cuDevSmResourceSplitByCount(groups, &n, &dev, nullptr, 0, 8) == CUDA_ERROR_INVALID_VALUE);
  n = 1;
  CHECK(cuDevSmResourceSplitByCount(&one, &n, &groups[0], nullptr, 0, 8) == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource bogus{};
  bogus.type = CU_DEV_RESOURCE_TYPE_SM;
  bogus.sm.smCount = 64;
  CHECK(cuDevSmResourceSplitByCount(&one, &n, &bogus, nullptr, 0, 8) == CUDA_ERROR_INVALID_VALUE);
  CUdevResource not_sm = dev;
  not_sm.type = CU_DEV_RESOURCE_TYPE_INVALID;
  CHECK(cuDevSmResourceSplitByCount(&one, &n, &not_sm, nullptr, 0, 8) == CUDA_ERROR_INVALID_RESOURCE_TYPE);

  // Descriptors: groups of one split together, not of two; nothing empty.
  CUdevResourceDesc desc;
  CK(cuDevResourceGenerateDesc(&desc, groups, 2));
  CHECK(cuDevResourceGenerateDesc(nullptr, groups, 1) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuDevResourceGenerateDesc(&desc, groups, 0) == CUDA_ERROR_INVALID_VALUE);
  CUdevResource mixed[2] = {groups[0], one_rest};
  CHECK(cuDevResourceGenerateDesc(&desc, mixed, 2) == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CUdevResource empty{};
  n = 4;
  CK(cuDevSmResourceSplitByCount(groups, &n, &dev, &empty, 0, 33));  // 4 x 40 > 132: 3 groups, 12 left
  CHECK(n == 3 && empty.sm.smCount == 12);
  CUdevResource with_rest[2] = {groups[0], empty};
  CUdevResourceDesc both;
  CK(cuDevResourceGenerateDesc(&both, with_rest, 2));  // a group and its split's remainder: allowed

  // Green contexts: CU_GREEN_CTX_DEFAULT_STREAM required.
  CK(cuDevResourceGenerateDesc(&desc, &groups[0], 1));
  CUgreenCtx g;
  CHECK(cuGreenCtxCreate(&g, desc, 0, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGreenCtxCreate(&g, desc, 5, CU_GREEN_CTX_DEFAULT_STREAM) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(cuGreenCtxCreate(&g, nullptr, 0, CU_GREEN_CTX_DEFAULT_STREAM) == CUDA_ERROR_INVALID_VALUE);
  CK(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  CUdevResource got{};
  CK(cuGreenCtxGetDevResource(g, &got, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(got.sm.smCount == 40);
  unsigned long long id = 0;
  CK(cuGreenCtxGetId(g, &id));
  CHECK(id > 0);

  // Its streams: non-blocking required; priorities clamped to the context's range.
  CUstream s;
  CHECK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_DEFAULT, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGreenCtxStreamCreate(nullptr, g, CU_STREAM_NON_BLOCKING, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuGreenCtxStreamCreate(&s, nullptr, CU_STREAM_NON_BLOCKING, 0) == CUDA_ERROR_INVALID_CONTEXT);
  CK(cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, -100));
  int least = 0, greatest = 0, priority = 0;
  CK(cuCtxGetStreamPriorityRange(&least, &greatest));
  CK(cuStreamGetPriority(s, &priority));
  CHECK(priority == greatest);
  unsigned flags = 0;
  CK(cuStreamGetFlags(s, &flags));
  CHECK(flags & CU_STREAM_NON_BLOCKING);
  CUgreenCtx which = nullptr;
  CK(cuStreamGetGreenCtx(s, &which));
  CHECK(which == g);
  CUstream plain;
  CK(cuStreamCreate(&plain, CU_STREAM_NON_BLOCKING));
  CK(cuStreamGetGreenCtx(plain, &which));
  CHECK(which == nullptr);
  CK(cuStreamGetGreenCtx(CU_STREAM_LEGACY, &which));
  CHECK(which == nullptr);
  CUcontext converted = nullptr, of_stream = nullptr, primary = nullptr;
  CK(cuCtxFromGreenCtx(&converted, g));
  CHECK(cuCtxFromGreenCtx(nullptr, g) == CUDA_ERROR_INVALID_VALUE);
  CK(cuStreamGetCtx_v2(s, &of_stream, &which));
  CHECK(of_stream == converted && which == g);
  CK(cuCtxGetCurrent(&primary));
  CHECK(converted != primary);
  CK(cuCtxGetDevResource(converted, &got, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(got.sm.smCount == 40);
  // With the converted context current, the NULL stream and new streams are the green context's.
  CK(cuCtxSetCurrent(converted));
  CK(cuStreamGetGreenCtx(CU_STREAM_LEGACY, &which));
  CHECK(which == g);
  CUstream made_inside;
  CK(cuStreamCreate(&made_inside, CU_STREAM_NON_BLOCKING));
  CK(cuStreamGetGreenCtx(made_inside, &which));
  CHECK(which == g);
  CK(cuCtxSetCurrent(primary));

  // One address space: memory of the primary context, written on the green stream, read back.
  CUdeviceptr p;
  CK(cuMemAlloc(&p, 4096));
  CK(cuMemsetD32Async(p, 0x5eed5eed, 1024, s));
  unsigned v = 0;
  CK(cuStreamSynchronize(s));
  CK(cuMemcpyDtoH(&v, p + 8, 4));
  CHECK(v == 0x5eed5eed);
  CK(cuMemFree(p));

  // Destroyed: the green context's streams fail; the handle is not valid any more.
  CUstream left;
  CK(cuGreenCtxStreamCreate(&left, g, CU_STREAM_NON_BLOCKING, 0));
  CK(cuStreamDestroy(s));
  CK(cuStreamDestroy(made_inside));
  CK(cuGreenCtxDestroy(g));
  CHECK(cuGreenCtxDestroy(g) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(cuStreamSynchronize(left) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(cuStreamQuery(left) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  unsigned long long ns = 1000;
  void* params[] = {&ns};
  CHECK(cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, left, params, nullptr) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(cuStreamDestroy(left) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(cuGreenCtxStreamCreate(&left, g, CU_STREAM_NON_BLOCKING, 0) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuCtxFromGreenCtx(&converted, g) == CUDA_ERROR_INVALID_CONTEXT);
  CK(cuStreamDestroy(plain));
}

static void check_confined() {
  CUgreenCtx g = make_green(32);
  CUstream green = green_stream(g), plain;
  CK(cuStreamCreate(&plain, CU_STREAM_NON_BLOCKING));
  // 132 blocks of a 2 ms kernel: on 32 SMs its blocks run in 132/32 as many waves.
  double all = best_of(3, plain, 3, 2000000, 132);
  double part = best_of(3, green, 3, 2000000, 132);
  double small = best_of(3, green, 3, 2000000, 32);  // fits the partition: as fast as anywhere
  std::printf("3 x 2 ms, 132 blocks: all SMs %.1f ms, 32 SMs %.1f ms; 32 blocks on 32 SMs %.1f ms\n", all * 1e3,
              part * 1e3, small * 1e3);
  CHECK(all >= 0.006 && all < 0.006 * 1.4);
  CHECK(part >= 0.006 * 132 / 32 && part < 0.006 * 132 / 32 * 1.3);
  CHECK(small >= 0.006 && small < 0.006 * 1.4);
  // A graph captured on the green stream keeps its 32 SMs when launched on a plain stream; one
  // captured on a plain stream runs in the primary context, on all SMs, even launched on the
  // green stream.
  double replay = replay_graph(green, plain), on_green = replay_graph(plain, green);
  std::printf("graphs: captured on the green stream, launched on a plain one %.1f ms; captured on a plain one, "
              "launched on the green one %.1f ms\n", replay * 1e3, on_green * 1e3);
  CHECK(replay >= 0.006 * 132 / 32 && replay < 0.006 * 132 / 32 * 1.3);
  CHECK(on_green >= 0.006 && on_green < 0.006 * 1.4);
  CK(cuStreamDestroy(green));
  CK(cuGreenCtxDestroy(g));
}

// SIMGPU_SHARING=mps: a child process runs whole-GPU kernels (on a 64-SM partition or on all
// SMs) while this one times its own 66-block kernels. The child inherits the loaded module and
// the current context (the simulated driver supports fork); its streams are its own.
static double beside(bool partitioned) {
  int go[2], done[2];
  CHECK(pipe(go) == 0 && pipe(done) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    CHECK(fcntl(done[0], F_SETFL, O_NONBLOCK) == 0);
    CUstream s;
    if (partitioned) s = green_stream(make_green(64));
    else CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    char b = 1;
    CHECK(write(go[1], &b, 1) == 1);
    unsigned long long ns = 1000000;
    void* params[] = {&ns};
    while (read(done[0], &b, 1) != 1) {  // until the parent says stop
      for (int i = 0; i < 5; ++i) CK(cuLaunchKernel(g_spin, 132, 1, 1, 128, 1, 1, 0, s, params, nullptr));
      CK(cuStreamSynchronize(s));
    }
    _exit(0);
  }
  char b = 0;
  CHECK(read(go[0], &b, 1) == 1);
  CUstream mine;
  CK(cuStreamCreate(&mine, CU_STREAM_NON_BLOCKING));
  double t = best_of(3, mine, 5, 1000000, 66);
  CHECK(write(done[1], &b, 1) == 1);
  int status;
  CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CK(cuStreamDestroy(mine));
  for (int fd : {go[0], go[1], done[0], done[1]}) close(fd);
  return t;
}

int main(int argc, char** argv) {
  CHECK(argc == 3);
  std::string check = argv[2];
  if (check == "mps") {
    g_spin = load_kernel(argv[1], "spin_kernel");
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int mps = 0;
    CK(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 0));
    CHECK(mps == 1);  // SIMGPU_SHARING=mps: an MPS client
    double alone = best_of(3, s, 5, 1000000, 66);
    double shared = beside(false), partitioned = beside(true);
    std::printf("5 x 1 ms on 66 SMs: alone %.1f ms; beside whole-GPU kernels on all SMs %.1f ms, on a 64-SM "
                "partition %.1f ms\n", alone * 1e3, shared * 1e3, partitioned * 1e3);
    CHECK(shared > alone * 1.3);       // 66 + 132 SMs wanted: each runs at 2/3 speed
    CHECK(partitioned < alone * 1.2);  // 66 + 64 fit the 132
  } else {
    g_spin = load_kernel(argv[1], "spin_kernel");
    if (check == "api") {
      check_api();
    } else if (check == "confined") {
      check_confined();
    } else if (check == "mps_limited") {
      CUgreenCtx g = make_green(32);  // created: the percentage does not refuse it
      CUstream s = green_stream(g);
      double t = best_of(3, s, 3, 2000000, 132);  // on the client's 66 SMs: two waves
      std::printf("3 x 2 ms, 132 blocks, on a 32-SM green stream of a 50%% MPS client: %.1f ms\n", t * 1e3);
      CHECK(t >= 0.012 && t < 0.012 * 1.3);
    } else {
      CHECK(!"unknown check");
    }
  }
  std::printf("simgpu green %s: ok\n", check.c_str());
  return 0;
}
