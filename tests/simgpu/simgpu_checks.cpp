// Checks of the simulated driver itself (no libtandem): spin accuracy, image names, capture
// error codes, failure injection, VMM sharing across processes, time-slice contention (also
// with a process in a PID namespace of its own, as in a container) and its hand-over when a
// process's kernels on several streams finish together, or when all it has queued waits.
// Also SM limits under MPS (an active thread percentage, an execution affinity) and that a
// GPU without MPS has none. Graph memory: a capture's allocation takes an address, and the
// GPU's memory only from the graph's launch (run with a GPU of 64 MiB).
// Usage: simgpu_checks FATBIN CHECK   (CHECK: spin | names | capture | fail | vmm | contention |
//                                      contention_pidns | release | blocked_owner | sm_limit |
//                                      no_sm_limit | graph_memory)
#include <cuda.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "check.h"
#include "protocol.h"


static CUfunction g_spin;
static CUmodule g_mod;

static void setup(const char* fatbin) { g_spin = load_kernel(fatbin, "spin_kernel", &g_mod); }

static double run_spins(int n, unsigned long long ns, unsigned blocks = 132) {
  void* params[] = {&ns};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) CK(cuLaunchKernel(g_spin, blocks, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  CK(cuCtxSynchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The fd crosses processes the way tandemd hands memory over: SCM_RIGHTS on a UNIX socket.
static void send_fd(int sock, int fd) { CHECK(tandem::send_message_with_fd(sock, tandem::MessageType::hello, "", fd)); }

static int recv_fd(int sock) {
  tandem::MessageHeader h{};
  std::string payload;
  int fd = -1;
  CHECK(tandem::recv_message_with_fd(sock, h, payload, fd, 5000) == tandem::RecvStatus::ok && fd >= 0);
  return fd;
}

int main(int argc, char** argv) {
  CHECK(argc == 3);
  std::string check = argv[2];
  if (check == "vmm" || check == "contention" || check == "release" || check == "blocked_owner") {
    // fork before any CUDA use: each process is its own CUDA user
  } else {
    setup(argv[1]);
  }
  if (check == "spin") {
    // 20 x 2 ms, best of 3: load from other work on the machine only ever adds time.
    double t = std::min({run_spins(20, 2000000), run_spins(20, 2000000), run_spins(20, 2000000)});
    std::printf("20 x 2 ms spin kernels: %.1f ms (best of 3)\n", t * 1e3);
    CHECK(t >= 0.040 && t < 0.040 * 1.5);
  } else if (check == "names") {
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, g_mod, "no_such_kernel") == CUDA_ERROR_NOT_FOUND);
    CK(cuModuleGetFunction(&f, g_mod, "ncclDevKernel_AllReduce_Sum_f32_spin"));
    const char* name = nullptr;
    CK(cuFuncGetName(&name, f));
    CHECK(std::string(name) == "ncclDevKernel_AllReduce_Sum_f32_spin");
  } else if (check == "capture") {
    CUstream s, other;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&other, 0));
    unsigned long long ns = 1000;
    void* params[] = {&ns};
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr));
    CUstreamCaptureStatus st;
    CK(cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK(cuStreamIsCapturing(nullptr, &st) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CUevent ev;
    CK(cuEventCreate(&ev, 0));
    CK(cuEventRecord(ev, s));
    CHECK(cuEventQuery(ev) == CUDA_ERROR_CAPTURED_EVENT);
    CHECK(cuStreamQuery(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g;
    CHECK(cuStreamEndCapture(s, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // The legacy stream may not be used while a global capture is open.
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK(cuStreamEndCapture(s, &g) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // Beside a global capture, an event query or a stream's synchronization (of a stream not
    // captured) is refused and invalidates the capture, in the capturing thread and in another
    // thread of the default mode; a thread-local or relaxed thread's is not (as an H200 with
    // driver 580 answers).
    CUevent done;
    CK(cuEventCreate(&done, 0));
    CK(cuEventRecord(done, other));
    CK(cuStreamSynchronize(other));
    auto beside_capture = [&](bool other_thread, CUstreamCaptureMode mode, CUresult (*call)(CUevent, CUstream)) {
      CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
      CK(cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr));
      CUresult r = CUDA_SUCCESS;
      auto body = [&] {
        CUstreamCaptureMode m = mode;
        CK(cuThreadExchangeStreamCaptureMode(&m));
        r = call(done, other);
        CK(cuThreadExchangeStreamCaptureMode(&m));
      };
      if (other_thread) std::thread(body).join();
      else body();
      CUgraph graph = nullptr;
      CUresult end = cuStreamEndCapture(s, &graph);
      if (graph) CK(cuGraphDestroy(graph));
      return std::make_pair(r, end);
    };
    auto query = [](CUevent e, CUstream) { return cuEventQuery(e); };
    auto sync = [](CUevent, CUstream o) { return cuStreamSynchronize(o); };
    auto refused = std::make_pair(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    auto fine = std::make_pair(CUDA_SUCCESS, CUDA_SUCCESS);
    CHECK(beside_capture(false, CU_STREAM_CAPTURE_MODE_GLOBAL, query) == refused);
    CHECK(beside_capture(true, CU_STREAM_CAPTURE_MODE_GLOBAL, query) == refused);
    CHECK(beside_capture(true, CU_STREAM_CAPTURE_MODE_GLOBAL, sync) == refused);
    CHECK(beside_capture(true, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, query) == fine);
    CHECK(beside_capture(false, CU_STREAM_CAPTURE_MODE_RELAXED, query) == fine);
    CHECK(beside_capture(true, CU_STREAM_CAPTURE_MODE_RELAXED, sync) == fine);
    // The context's synchronization is refused in every mode: it would wait for the capture.
    auto context_sync = [](CUevent, CUstream) { return cuCtxSynchronize(); };
    CHECK(beside_capture(false, CU_STREAM_CAPTURE_MODE_RELAXED, context_sync) == refused);
    CHECK(beside_capture(true, CU_STREAM_CAPTURE_MODE_RELAXED, context_sync) == refused);
    CK(cuCtxSynchronize());  // no capture open: fine
  } else if (check == "graph_memory") {
    // As on a GPU (CUDA Programming Guide, "Graph Memory Nodes": a graph allocation's address is
    // assigned when its node is made, its lifetime begins when the GPU reaches the node): with
    // 16 MiB left, a capture allocates 32 MiB, which takes no memory until a launch maps it.
    const size_t mib = 1 << 20;
    auto free_mib = [&] {
      size_t free_bytes = 0, total = 0;
      CK(cuMemGetInfo(&free_bytes, &total));
      CHECK(total == 64 * mib);
      return free_bytes / mib;
    };
    auto graph_mib = [](CUgraphMem_attribute attr) {
      cuuint64_t v = 1;
      CK(cuDeviceGetGraphMemAttribute(0, attr, &v));
      return v / (1 << 20);
    };
    CUdeviceptr peak;
    CK(cuMemAlloc(&peak, 48 * mib));  // another user at its peak
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static unsigned char out[16];
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr d = 0;
    CK(cuMemAllocAsync(&d, 32 * mib, s));  // was CUDA_ERROR_OUT_OF_MEMORY: counted at capture
    CK(cuMemsetD8Async(d, 0x5a, 32 * mib, s));
    CK(cuMemcpyDtoHAsync(out, d + 32 * mib - sizeof out, sizeof out, s));
    CK(cuMemFreeAsync(d, s));
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    CUgraphExec exec;
    CK(cuGraphInstantiate(&exec, g, 0));
    CHECK(free_mib() == 16 && graph_mib(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    // Launched without room: the launch fails, nothing runs and nothing is counted.
    CHECK(cuGraphLaunch(exec, s) == CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuStreamSynchronize(s));
    CHECK(out[0] == 0 && free_mib() == 16 && graph_mib(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0);
    // With room: mapped at the launch and kept for the next ones, until the graph goes.
    CK(cuMemFree(peak));
    for (int round = 0; round < 2; ++round) {
      CK(cuGraphLaunch(exec, s));
      CK(cuStreamSynchronize(s));
      CHECK(out[0] == 0x5a && out[15] == 0x5a);
      CHECK(free_mib() == 32 && graph_mib(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 32);
    }
    CHECK(cuMemAlloc(&peak, 48 * mib) == CUDA_ERROR_OUT_OF_MEMORY);  // the graph holds its 32 MiB
    CK(cuGraphExecDestroy(exec));
    CHECK(free_mib() == 64 && graph_mib(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0);
    CHECK(graph_mib(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) == 32);
    // cuGraphUpload maps it before any launch, as CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD does.
    CK(cuGraphInstantiate(&exec, g, 0));
    CK(cuGraphUpload(exec, s));
    CHECK(free_mib() == 32);
    CK(cuGraphExecDestroy(exec));
    CUDA_GRAPH_INSTANTIATE_PARAMS params{};
    params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    params.hUploadStream = s;
    CK(cuGraphInstantiateWithParams(&exec, g, &params));
    CHECK(free_mib() == 32);
    CK(cuGraphExecDestroy(exec));
    CK(cuGraphDestroy(g));
    CHECK(free_mib() == 64);
  } else if (check == "fail") {
    // Run with SIMGPU_FAIL=cuMemAlloc:2,cuLaunchKernel:3
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 4096));
    CHECK(cuMemAlloc(&p, 4096) == CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuMemAlloc(&p, 4096));
    unsigned long long ns = 10;
    void* params[] = {&ns};
    CK(cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
    CK(cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
    CHECK(cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr) == CUDA_ERROR_LAUNCH_FAILED);
  } else if (check == "vmm") {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t pid = fork();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t size = 2 << 20;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    setup(argv[1]);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CUmemGenericAllocationHandle h;
    if (pid == 0) {  // exporter: writes, sends the fd, waits for the importer's answer
      CK(cuMemCreate(&h, size, &prop, 0));
      int fd = -1;
      CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      CK(cuMemMap(va, size, 0, h, 0));
      CK(cuMemSetAccess(va, size, &access, 1));
      CK(cuMemsetD32(va, 0xabcd1234, size / 4));
      send_fd(sv[0], fd);
      char done;
      CHECK(read(sv[0], &done, 1) == 1);  // the importer's answer
      unsigned v;
      CK(cuMemcpyDtoH(&v, va + 4096, 4));
      _exit(v == 0x5678 ? 0 : 3);
    }
    int fd = recv_fd(sv[1]);
    CK(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CK(cuMemMap(va, size, 0, h, 0));
    CK(cuMemSetAccess(va, size, &access, 1));
    unsigned v = 0;
    CK(cuMemcpyDtoH(&v, va, 4));
    CHECK(v == 0xabcd1234);  // the exporter's bytes
    unsigned w = 0x5678;
    CK(cuMemcpyHtoD(va + 4096, &w, 4));
    CHECK(write(sv[1], "x", 1) == 1);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CK(cuMemUnmap(va, size));
    CK(cuMemRelease(h));
  } else if (check == "contention" || check == "contention_pidns") {
    // Alone, then two processes at once: in timeslice mode each sees about twice the time.
    // contention_pidns: the other process is pid 1 of a PID namespace of its own, as in a
    // container: a pid names neither process to the other, yet each sees the other's kernels
    // (docs/simgpu.md).
    const bool pidns = check == "contention_pidns";
    setup(argv[1]);
    double alone = std::min({run_spins(10, 5000000), run_spins(10, 5000000), run_spins(10, 5000000)});
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      if (pidns) {
        if (unshare(CLONE_NEWPID) != 0) _exit(77);  // not root: skipped
        pid_t inner = fork();                       // pid 1 of the new namespace
        int status;
        if (inner != 0) _exit(waitpid(inner, &status, 0) == inner && WIFEXITED(status) ? WEXITSTATUS(status) : 1);
        CHECK(getpid() == 1);
      }
      double t = run_spins(10, 5000000);
      CHECK(write(p[1], &t, sizeof t) == sizeof t);
      _exit(0);
    }
    double mine = run_spins(10, 5000000);
    double theirs = 0;
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
      std::printf("SKIP: unshare(CLONE_NEWPID) needs root\n");
      return 77;
    }
    CHECK(WEXITSTATUS(status) == 0 && read(p[0], &theirs, sizeof theirs) == sizeof theirs);
    double together = (mine + theirs) / 2;
    std::printf("alone %.1f ms, together %.1f ms (ratio %.2f; this process %.2f, the other %.2f)\n", alone * 1e3,
                together * 1e3, together / alone, mine / alone, theirs / alone);
    CHECK(together / alone > 1.5 && together / alone < 2.6 && (!pidns || std::min(mine, theirs) / alone > 1.4));
  } else if (check == "release") {
    // Timeslice: a process gives the GPU up when its last unfinished kernel ends, also when
    // several of its streams' kernels end together. Here 16 kernels of 8 blocks run at once
    // and end together, while another process's kernel waits for the GPU; this process then
    // stays idle, so a GPU left owned by it would hold the other kernel forever.
    int go[2], done[2];
    CHECK(pipe(go) == 0 && pipe(done) == 0);
    pid_t pid = fork();
    setup(argv[1]);
    if (pid == 0) {
      close(go[1]);  // the parent's close ends this loop
      unsigned long long ns = 100000;
      void* params[] = {&ns};
      char b;
      while (read(go[0], &b, 1) == 1) {
        CK(cuLaunchKernel(g_spin, 132, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
        CK(cuCtxSynchronize());
        CHECK(write(done[1], &b, 1) == 1);
      }
      _exit(0);
    }
    constexpr int kStreams = 16, kRounds = 300;
    CUstream streams[kStreams];
    for (CUstream& s : streams) CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long ns = 300000;
    void* params[] = {&ns};
    for (int r = 0; r < kRounds; ++r) {
      for (CUstream s : streams) CK(cuLaunchKernel(g_spin, 8, 1, 1, 128, 1, 1, 0, s, params, nullptr));
      CHECK(write(go[1], "x", 1) == 1);
      CK(cuCtxSynchronize());
      pollfd answer{done[0], POLLIN, 0};
      if (poll(&answer, 1, 2000) != 1) {
        std::fprintf(stderr, "round %d: the other process's kernel waited 2 s for a GPU this one no longer used\n", r);
        kill(pid, SIGKILL);
        CHECK(!"the GPU was given up");
      }
      char b;
      CHECK(read(done[0], &b, 1) == 1);
    }
    close(go[1]);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    std::printf("%d rounds of %d kernels ending together: the other process always got the GPU\n", kRounds, kStreams);
  } else if (check == "blocked_owner") {
    // Timeslice: a process whose queued kernels all wait (here behind an event that another
    // stream records after 100 ms of host work; a pipeline stage's backward kernels behind the
    // receive of their gradients) runs nothing: another process's kernel takes the GPU at once,
    // not when the waiting kernels finally run.
    int ready[2], took[2];
    CHECK(pipe(ready) == 0 && pipe(took) == 0);
    pid_t pid = fork();
    setup(argv[1]);
    if (pid == 0) {
      char b;
      CHECK(read(ready[0], &b, 1) == 1);
      auto t0 = std::chrono::steady_clock::now();
      run_spins(1, 1000000);
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CHECK(write(took[1], &t, sizeof t) == sizeof t);
      _exit(0);
    }
    CUstream compute, other;
    CK(cuStreamCreate(&compute, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CUevent first_done, arrived;
    CK(cuEventCreate(&first_done, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&arrived, CU_EVENT_DISABLE_TIMING));
    unsigned long long ns = 2000000;
    void* params[] = {&ns};
    CK(cuLaunchHostFunc(other, [](void*) { usleep(100000); }, nullptr));
    CK(cuEventRecord(arrived, other));
    CK(cuLaunchKernel(g_spin, 132, 1, 1, 128, 1, 1, 0, compute, params, nullptr));
    CK(cuEventRecord(first_done, compute));
    CK(cuStreamWaitEvent(compute, arrived, 0));
    CK(cuLaunchKernel(g_spin, 132, 1, 1, 128, 1, 1, 0, compute, params, nullptr));
    CK(cuEventSynchronize(first_done));  // this process owns the GPU; its next kernel waits
    CHECK(write(ready[1], "x", 1) == 1);
    double theirs = 0;
    CHECK(read(took[0], &theirs, sizeof theirs) == sizeof theirs);
    CK(cuCtxSynchronize());
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    std::printf("another process's 1 ms kernel took %.1f ms beside this one's kernel waiting 100 ms for an event\n",
                theirs * 1e3);
    CHECK(theirs < 0.030);
  } else if (check == "sm_limit") {
    // Run with SIMGPU_SHARING=mps CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50: the primary context
    // gets 66 of 132 SMs; a whole-GPU kernel runs in two waves, a half-GPU one as before.
    CUexecAffinityParam a{};
    CK(cuCtxGetExecAffinity(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    CHECK(a.param.smCount.val == 66);
    int supported = 0;
    CK(cuDeviceGetExecAffinitySupport(&supported, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0));
    CHECK(supported == 1);
    double whole = std::min(run_spins(5, 2000000), run_spins(5, 2000000));
    double half = std::min(run_spins(5, 2000000, 66), run_spins(5, 2000000, 66));
    std::printf("5 x 2 ms on 66 SMs: 132-block kernels %.1f ms, 66-block %.1f ms\n", whole * 1e3, half * 1e3);
    CHECK(whole >= 0.020 && whole < 0.020 * 1.4);
    CHECK(half >= 0.010 && half < 0.010 * 1.4);
    // A context created with an affinity of 33 SMs: a quarter of the GPU, four waves.
    CUexecAffinityParam quarter{};
    quarter.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    quarter.param.smCount.val = 33;
    CUctxCreateParams create{&quarter, 1, nullptr};
    CUcontext ctx;
    CK(cuCtxCreate(&ctx, &create, 0, 0));
    CK(cuCtxGetExecAffinity(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    CHECK(a.param.smCount.val == 33);
    double limited = std::min(run_spins(2, 2000000), run_spins(2, 2000000));  // the module is the process's
    std::printf("2 x 2 ms on 33 SMs: %.1f ms\n", limited * 1e3);
    CHECK(limited >= 0.016 && limited < 0.016 * 1.4);
    CK(cuCtxDestroy(ctx));
  } else if (check == "no_sm_limit") {
    // Without MPS (time slicing) the percentage is not MPS's to apply and an affinity is refused.
    CUexecAffinityParam a{};
    CK(cuCtxGetExecAffinity(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
    CHECK(a.param.smCount.val == 132);
    a.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    a.param.smCount.val = 33;
    CUctxCreateParams create{&a, 1, nullptr};
    CUcontext ctx;
    CHECK(cuCtxCreate(&ctx, &create, 0, 0) == CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    double whole = std::min(run_spins(5, 2000000), run_spins(5, 2000000));
    CHECK(whole >= 0.010 && whole < 0.010 * 1.4);
  } else {
    CHECK(!"unknown check");
  }
  std::printf("simgpu %s: ok\n", check.c_str());
  return 0;
}
