// NCCL's C API on the simulated GPUs: 2 (or RANKS) processes, one GPU each, one communicator.
// Usage: simgpu_nccl CHECK [RANKS]
//        (CHECK: basic | late | bandwidth | straggler | shared | graph | steps | loader | p2p)
//  basic:     ncclGetUniqueId / ncclCommInitRank, all_reduce, broadcast, a barrier-like
//             1-element all_reduce, ncclCommDestroy; the communicator's rank and size.
//  late:      rank 1 starts its all_reduce 200 ms after the others: theirs complete no earlier
//             (a collective ends once every rank has started it); rank 1's is not delayed.
//  bandwidth: all_reduces of 64 and 256 MiB take about bytes over the link / SIMGPU_LINK_GBPS
//             (2(n-1)/n of the message per rank, NCCL's ring), and 4 times as long as each other
//             (best of 3 each); broadcast, all_gather and reduce_scatter of 32 MiB per rank
//             take 1, n-1 and n-1 times 32 MiB over the link.
//  straggler: 20 steps of compute and all_reduce, rank 1 40 ms late to each (run under tandem
//             by nccl_e2e.py).
//  graph:     an all_reduce captured in a CUDA graph, replayed 3 times with rank 1 100 ms late
//             to each: the others' replays wait for it.
//  steps:     data-parallel training for NCCL_STEPS_SECONDS (default 5): each step 20 x 1 ms of
//             compute on the whole GPU, an all_reduce of about 6 ms at SIMGPU_LINK_GBPS, 4 ms of
//             host work; each rank prints {"rank", "steps", "seconds", "steps_per_s"} (the slo
//             policy's realistic workload, run by slo_ranks_e2e.py).
//  loader:    another thread of each rank loads and unloads a library (SIMGPU_TEST_DSO) in a
//             loop while the ranks run their first collectives, as PyTorch loads cuDNN while
//             its first all_reduce runs: the simulator's reading of NCCL (its version, for the
//             work layout) must not deadlock with the dynamic loader.
//  shared:    another process keeps GPU 1 busy: rank 1's transfer runs at about half speed
//             (time slices) and rank 0's all_reduce lasts as long (at least 1.5x alone).
//  p2p:       point-to-point along a chain 0 -> 1 -> ... -> n-1: each rank receives a 1 MiB
//             buffer from the previous rank and sends its own to the next. The bytes arrive
//             (a pattern seeded by the parent's pid, so that another job's transfer met by
//             mistake fails the check); two sends of different content to the same peer
//             arrive in order; a receive posted 200 ms before its send takes ~200 ms, the send
//             not (it fits NCCL's buffers).
// The parent forks the ranks before any CUDA call and hands rank 0's unique id to the others
// through a pipe. Every wait is bounded: a rank gives up after 60 s, the parent after 90 s.
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

static int g_rank = -1;
static int g_ranks = 2;  // one process per simulated GPU
static int* g_stop_step = nullptr;  // steps: shared by the ranks (mapped before the fork)

#define CUDA_OK(x)                                                                              \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "rank %d: %s:%d %s -> %s\n", g_rank, __FILE__, __LINE__, #x,         \
                   cudaGetErrorString(e_));                                                     \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
#define NCCL_OK(x)                                                                              \
  do {                                                                                          \
    ncclResult_t r_ = (x);                                                                      \
    if (r_ != ncclSuccess) {                                                                    \
      std::fprintf(stderr, "rank %d: %s:%d %s -> %s (%s)\n", g_rank, __FILE__, __LINE__, #x,    \
                   ncclGetErrorString(r_), ncclGetLastError(nullptr));                          \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)
#define EXPECT(c)                                                                               \
  do {                                                                                          \
    if (!(c)) {                                                                                 \
      std::fprintf(stderr, "rank %d: FAIL %s:%d: %s\n", g_rank, __FILE__, __LINE__, #c);        \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

static double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Rank {
  ncclComm_t comm;
  cudaStream_t stream;
};

static void barrier(Rank& r, float* scratch) {
  NCCL_OK(ncclAllReduce(scratch, scratch, 1, ncclFloat, ncclSum, r.comm, r.stream));
  CUDA_OK(cudaStreamSynchronize(r.stream));
}

// Seconds from launching an all_reduce of `bytes` to its completion on this rank.
static double timed_all_reduce(Rank& r, float* buf, size_t bytes) {
  double t0 = seconds();
  NCCL_OK(ncclAllReduce(buf, buf, bytes / sizeof(float), ncclFloat, ncclSum, r.comm, r.stream));
  CUDA_OK(cudaStreamSynchronize(r.stream));
  return seconds() - t0;
}

static void run_basic(Rank& r, float* buf) {
  int n = 0, me = -1;
  NCCL_OK(ncclCommCount(r.comm, &n));
  NCCL_OK(ncclCommUserRank(r.comm, &me));
  EXPECT(n == g_ranks && me == g_rank);
  int device = -1;
  NCCL_OK(ncclCommCuDevice(r.comm, &device));
  EXPECT(device == g_rank);
  NCCL_OK(ncclAllReduce(buf, buf, 1 << 18, ncclFloat, ncclSum, r.comm, r.stream));
  NCCL_OK(ncclBroadcast(buf, buf, 1 << 18, ncclFloat, 0, r.comm, r.stream));
  NCCL_OK(ncclAllReduce(buf, buf, 1 << 20, ncclBfloat16, ncclSum, r.comm, r.stream));
  CUDA_OK(cudaStreamSynchronize(r.stream));
  barrier(r, buf);
}

static void run_late(Rank& r, float* buf) {
  barrier(r, buf);  // both ranks ready
  if (g_rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double t = timed_all_reduce(r, buf, 4 << 10);
  std::printf("rank %d: all_reduce took %.1f ms\n", g_rank, t * 1e3);
  if (g_rank != 1) EXPECT(t >= 0.190);  // waited for rank 1
  else EXPECT(t < 0.100);                // the others were already there
}

static void run_bandwidth(Rank& r, float* buf) {
  const char* gbps_env = std::getenv("SIMGPU_LINK_GBPS");
  EXPECT(gbps_env != nullptr);
  double gbps = std::atof(gbps_env);
  double times[2];
  const size_t sizes[2] = {64ull << 20, 256ull << 20};
  for (int i = 0; i < 2; ++i) {
    // Best of 3, each started together (a late peer adds its delay): load from other work on
    // the machine only ever adds time.
    times[i] = 1e9;
    for (int attempt = 0; attempt < 3; ++attempt) {
      barrier(r, buf);
      times[i] = std::min(times[i], timed_all_reduce(r, buf, sizes[i]));
    }
    double link_bytes = 2.0 * (g_ranks - 1) / g_ranks * static_cast<double>(sizes[i]);  // a ring all_reduce
    double expected = link_bytes / (gbps * 1e9);
    std::printf("rank %d: all_reduce of %zu MiB took %.1f ms (bytes / link: %.1f ms)\n", g_rank, sizes[i] >> 20,
                times[i] * 1e3, expected * 1e3);
    EXPECT(times[i] >= 0.95 * expected);
    EXPECT(times[i] <= 1.5 * expected + 0.030);  // the machine is shared: only ever slower
  }
  double ratio = times[1] / times[0];
  std::printf("rank %d: 256 MiB / 64 MiB time ratio %.2f\n", g_rank, ratio);
  EXPECT(ratio > 3.0 && ratio < 5.0);
  // The other collectives' bytes over the link, for 32 MiB per rank: broadcast the message,
  // all_gather and reduce_scatter (n-1) times a rank's part.
  const size_t part = 32ull << 20, count = part / sizeof(float);
  char* bytes = reinterpret_cast<char*>(buf);
  const char* names[3] = {"broadcast", "all_gather", "reduce_scatter"};
  const double factors[3] = {1.0, static_cast<double>(g_ranks - 1), static_cast<double>(g_ranks - 1)};
  for (int k = 0; k < 3; ++k) {
    double best = 1e9;
    for (int attempt = 0; attempt < 3; ++attempt) {
      barrier(r, buf);
      double t0 = seconds();
      if (k == 0) NCCL_OK(ncclBroadcast(buf, buf, count, ncclFloat, 0, r.comm, r.stream));
      if (k == 1) NCCL_OK(ncclAllGather(buf, bytes + part, count, ncclFloat, r.comm, r.stream));
      if (k == 2) NCCL_OK(ncclReduceScatter(bytes + part, buf, count, ncclFloat, ncclSum, r.comm, r.stream));
      CUDA_OK(cudaStreamSynchronize(r.stream));
      best = std::min(best, seconds() - t0);
    }
    double expected = factors[k] * static_cast<double>(part) / (gbps * 1e9);
    std::printf("rank %d: %s of 32 MiB per rank took %.1f ms (bytes / link: %.1f ms)\n", g_rank, names[k], best * 1e3,
                expected * 1e3);
    EXPECT(best >= 0.95 * expected && best <= 1.5 * expected + 0.030);
  }
}

// The simulator runs a kernel named *spin* for its argument's nanoseconds: a training step's compute.
__global__ void step_spin_kernel(long long ns) {}

// A training loop with a straggler: each of 20 steps is 10 ms of compute then an all_reduce;
// rank 1 reaches each step 40 ms after rank 0, whose GPU meanwhile holds only the waiting
// collective (a bubble, to tandemd).
static void run_straggler(Rank& r, float* buf) {
  barrier(r, buf);
  double t0 = seconds();
  for (int step = 0; step < 20; ++step) {
    if (g_rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    step_spin_kernel<<<132, 128, 0, r.stream>>>(10000000);
    CUDA_OK(cudaGetLastError());
    NCCL_OK(ncclAllReduce(buf, buf, 1 << 18, ncclFloat, ncclSum, r.comm, r.stream));
    CUDA_OK(cudaStreamSynchronize(r.stream));
  }
  // Rank 0's loop cannot end before rank 1's last all_reduce starts: 20 x (40 + 10) ms.
  double t = seconds() - t0;
  std::printf("rank %d: 20 steps in %.0f ms\n", g_rank, t * 1e3);
  EXPECT(t >= 0.95);
}

// Data-parallel training steps until rank 0 has run NCCL_STEPS_SECONDS. Every rank must run
// the same number of all_reduces: rank 0 names the last step in shared memory two steps
// ahead, and no rank is more than one step from another (each all_reduce waits for all).
static void run_steps(Rank& r, float* buf) {
  const char* gbps_env = std::getenv("SIMGPU_LINK_GBPS");
  const char* seconds_env = std::getenv("NCCL_STEPS_SECONDS");
  const double gbps = gbps_env ? std::atof(gbps_env) : 63, run_s = seconds_env ? std::atof(seconds_env) : 5;
  // An all_reduce moves 2(n-1)/n of its size over each rank's link.
  const size_t bytes = static_cast<size_t>(6e-3 * gbps * 1e9 / (2.0 * (g_ranks - 1) / g_ranks)) & ~size_t{3};
  EXPECT(bytes <= (256ull << 20));
  barrier(r, buf);
  double t0 = seconds();
  int step = 0;
  for (; step < __atomic_load_n(g_stop_step, __ATOMIC_ACQUIRE); ++step) {
    if (g_rank == 0 && seconds() - t0 >= run_s && __atomic_load_n(g_stop_step, __ATOMIC_ACQUIRE) == 1 << 30)
      __atomic_store_n(g_stop_step, step + 2, __ATOMIC_RELEASE);
    for (int k = 0; k < 20; ++k) step_spin_kernel<<<132, 128, 0, r.stream>>>(1000000);
    CUDA_OK(cudaGetLastError());
    NCCL_OK(ncclAllReduce(buf, buf, bytes / sizeof(float), ncclFloat, ncclSum, r.comm, r.stream));
    CUDA_OK(cudaStreamSynchronize(r.stream));
    std::this_thread::sleep_for(std::chrono::milliseconds(4));  // data loading
  }
  double t = seconds() - t0;
  std::printf("{\"rank\": %d, \"steps\": %d, \"seconds\": %.3f, \"steps_per_s\": %.3f}\n", g_rank, step, t, step / t);
}

// Another process runs 10 ms kernels on GPU 1 without pause (until killed, at most 60 s):
// in time-slice mode rank 1's transfers get about half of GPU 1.
static int run_hog() {
  g_rank = -1;
  CUDA_OK(cudaSetDevice(1));
  for (double end = seconds() + 60; seconds() < end;) {
    step_spin_kernel<<<132, 128>>>(10000000);
    CUDA_OK(cudaDeviceSynchronize());
  }
  return 0;
}

// Rank 1's GPU is shared with the hog: its half-speed transfer holds rank 0's collective too.
static void run_shared(Rank& r, float* buf) {
  const char* gbps_env = std::getenv("SIMGPU_LINK_GBPS");
  EXPECT(gbps_env != nullptr);
  const size_t bytes = 64ull << 20;
  double expected = 2.0 * (g_ranks - 1) / g_ranks * static_cast<double>(bytes) / (std::atof(gbps_env) * 1e9);
  double best = 1e9;
  for (int attempt = 0; attempt < 3; ++attempt) {
    barrier(r, buf);
    best = std::min(best, timed_all_reduce(r, buf, bytes));
  }
  std::printf("rank %d: all_reduce of 64 MiB beside a busy GPU 1 took %.1f ms (alone: %.1f ms)\n", g_rank,
              best * 1e3, expected * 1e3);
  EXPECT(best >= 1.5 * expected);
}

// An all_reduce captured into a CUDA graph and replayed 3 times, rank 1 100 ms late to each
// replay: every replay meets its peers like a direct launch.
static void run_graph(Rank& r, float* buf) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal));
  NCCL_OK(ncclAllReduce(buf, buf, 1 << 18, ncclFloat, ncclSum, r.comm, r.stream));
  CUDA_OK(cudaStreamEndCapture(r.stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  barrier(r, buf);
  for (int replay = 0; replay < 3; ++replay) {
    if (g_rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    double t0 = seconds();
    CUDA_OK(cudaGraphLaunch(exec, r.stream));
    CUDA_OK(cudaStreamSynchronize(r.stream));
    double t = seconds() - t0;
    std::printf("rank %d: replay %d took %.1f ms\n", g_rank, replay, t * 1e3);
    if (g_rank != 1) EXPECT(t >= 0.090);
  }
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
}

static void run_loader(Rank& r, float* buf) {
  const char* dso = std::getenv("SIMGPU_TEST_DSO");
  EXPECT(dso != nullptr);
  std::atomic<bool> stop{false};
  std::atomic<long> loads{0};
  std::thread loader([&] {
    while (!stop.load()) {
      void* h = dlopen(dso, RTLD_NOW | RTLD_LOCAL);
      EXPECT(h != nullptr);
      EXPECT(dlclose(h) == 0);
      loads.fetch_add(1);
    }
  });
  while (loads.load() < 10) std::this_thread::sleep_for(std::chrono::microseconds(100));
  for (int i = 0; i < 20; ++i) barrier(r, buf);  // the first collectives, the loader still busy
  stop.store(true);
  loader.join();
  std::printf("rank %d: 20 collectives beside %ld loads of %s\n", g_rank, loads.load(), dso);
}

// The byte pattern of transfer `n` from `rank` in this job (the parent's pid tells jobs apart).
static unsigned char pattern(int rank, int n, size_t i) {
  return static_cast<unsigned char>((static_cast<unsigned>(getppid()) * 31u + rank * 7u + n * 13u + i * 101u) >> 3);
}

// Fills `bytes` of device memory with transfer `n`'s pattern of this rank.
static void fill(unsigned char* device, size_t bytes, int rank, int n) {
  std::string host(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<char>(pattern(rank, n, i));
  CUDA_OK(cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice));
}

// True when `bytes` of device memory hold transfer `n`'s pattern of `rank`.
static bool holds(const unsigned char* device, size_t bytes, int rank, int n) {
  std::string host(bytes, '\0');
  CUDA_OK(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < bytes; ++i)
    if (static_cast<unsigned char>(host[i]) != pattern(rank, n, i)) return false;
  return true;
}

static void run_p2p(Rank& r, float* buf) {
  const size_t bytes = 1 << 20;
  auto* base = reinterpret_cast<unsigned char*>(buf);
  unsigned char *out[2] = {base, base + bytes}, *in[2] = {base + 2 * bytes, base + 3 * bytes};
  const int next = g_rank + 1 < g_ranks ? g_rank + 1 : -1, prev = g_rank - 1;
  // Two transfers down the chain, each in its own group: they arrive in order.
  for (int n = 0; n < 2; ++n) fill(out[n], bytes, g_rank, n);
  CUDA_OK(cudaMemset(in[0], 0, 2 * bytes));
  barrier(r, buf + (4 * bytes) / sizeof(float));
  for (int n = 0; n < 2; ++n) {
    NCCL_OK(ncclGroupStart());
    if (next >= 0) NCCL_OK(ncclSend(out[n], bytes, ncclUint8, next, r.comm, r.stream));
    if (prev >= 0) NCCL_OK(ncclRecv(in[n], bytes, ncclUint8, prev, r.comm, r.stream));
    NCCL_OK(ncclGroupEnd());
  }
  CUDA_OK(cudaStreamSynchronize(r.stream));
  if (prev >= 0) {
    EXPECT(holds(in[0], bytes, prev, 0));
    EXPECT(holds(in[1], bytes, prev, 1));
    std::printf("rank %d: 2 x %zu bytes from rank %d arrived in order\n", g_rank, bytes, prev);
  }
  // A late sender: rank 0 sends 200 ms after rank 1 posted its receive.
  barrier(r, buf + (4 * bytes) / sizeof(float));
  if (g_rank > 1) return;
  double t0 = seconds();
  if (g_rank == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    t0 = seconds();
    NCCL_OK(ncclSend(out[0], bytes, ncclUint8, 1, r.comm, r.stream));
  } else {
    NCCL_OK(ncclRecv(in[1], bytes, ncclUint8, 0, r.comm, r.stream));
  }
  CUDA_OK(cudaStreamSynchronize(r.stream));
  double t = seconds() - t0;
  std::printf("rank %d: %s took %.1f ms\n", g_rank, g_rank == 0 ? "the late send" : "the early receive", t * 1e3);
  if (g_rank == 1) EXPECT(t >= 0.190 && holds(in[1], bytes, 0, 0));  // waited for the send
  else EXPECT(t < 0.100);                                             // its receive was there
}

static int run_rank(int rank, int id_fd, const std::string& check) {
  g_rank = rank;
  alarm(60);  // a hung rank fails the test instead of hanging it
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    for (int peer = 1; peer < g_ranks; ++peer) EXPECT(write(id_fd, &id, sizeof id) == static_cast<ssize_t>(sizeof id));
  } else {
    EXPECT(read(id_fd, &id, sizeof id) == static_cast<ssize_t>(sizeof id));
  }
  CUDA_OK(cudaSetDevice(rank));
  Rank r;
  NCCL_OK(ncclCommInitRank(&r.comm, g_ranks, id, rank));
  CUDA_OK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  float* buf = nullptr;
  CUDA_OK(cudaMalloc(&buf, 256ull << 20));  // lazily committed: only p2p writes (its first MiBs)
  if (check == "basic") run_basic(r, buf);
  else if (check == "late") run_late(r, buf);
  else if (check == "bandwidth") run_bandwidth(r, buf);
  else if (check == "straggler") run_straggler(r, buf);
  else if (check == "shared") run_shared(r, buf);
  else if (check == "graph") run_graph(r, buf);
  else if (check == "steps") run_steps(r, buf);
  else if (check == "loader") run_loader(r, buf);
  else if (check == "p2p") run_p2p(r, buf);
  else EXPECT(!"unknown check");
  NCCL_OK(ncclCommDestroy(r.comm));
  CUDA_OK(cudaFree(buf));
  CUDA_OK(cudaStreamDestroy(r.stream));
  std::printf("rank %d: %s ok\n", rank, check.c_str());
  std::fflush(stdout);
  return 0;
}

static void kill_all(const pid_t* pids) {
  for (int rank = 0; rank < g_ranks; ++rank) kill(pids[rank], SIGKILL);
}
static int run_ranks(const pid_t* pids);

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && (std::atoi(argv[2]) < 2 || std::atoi(argv[2]) > 8))) {
    std::fprintf(stderr, "usage: %s basic|late|bandwidth|straggler|shared|graph|steps|loader|p2p [RANKS: 2-8, default 2]\n", argv[0]);
    return 2;
  }
  if (argc == 3) g_ranks = std::atoi(argv[2]);
  void* shared = mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT(shared != MAP_FAILED);
  g_stop_step = static_cast<int*>(shared);
  *g_stop_step = 1 << 30;
  int id_pipe[2];
  EXPECT(pipe(id_pipe) == 0);
  pid_t pids[8];
  for (int rank = 0; rank < g_ranks; ++rank) {
    pids[rank] = fork();
    EXPECT(pids[rank] >= 0);
    // exit(), not _exit(): under tandem each rank writes its statistics file at exit.
    if (pids[rank] == 0) std::exit(run_rank(rank, rank == 0 ? id_pipe[1] : id_pipe[0], argv[1]));
  }
  pid_t hog = -1;
  if (std::string(argv[1]) == "shared") {
    hog = fork();
    EXPECT(hog >= 0);
    if (hog == 0) std::exit(run_hog());
  }
  int failed = run_ranks(pids);
  if (hog > 0) {
    kill(hog, SIGKILL);
    waitpid(hog, nullptr, 0);
  }
  return failed;
}

// Waits for the ranks (at most 90 s); a failed rank's peers are killed (they would wait for it).
static int run_ranks(const pid_t* pids) {
  int failed = 0;
  double deadline = seconds() + 90;
  for (int done = 0; done < g_ranks;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && std::find(pids, pids + g_ranks, pid) == pids + g_ranks) continue;  // not a rank (the hog)
    if (pid > 0) {
      ++done;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "rank process %d failed (status %#x)\n", static_cast<int>(pid), status);
        kill_all(pids);  // its peers would wait for it
        failed = 1;
      }
    } else if (seconds() > deadline) {
      std::fprintf(stderr, "ranks still running after 90 s: killing them\n");
      kill_all(pids);
      return 1;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return failed;
}
