// train-sim: a data-parallel-style training loop. Each iteration runs compute kernels, then a
// communication phase (an NCCL-named kernel standing in for the all-reduce, plus the host
// waiting for it, as a rank waits for its peers), then a host "data-loading" gap. Prints
// iterations/s as JSON lines.
//
// Built with -DTANDEM_EXAMPLES_NCCL=ON and run with --gpus N (N > 1) on a multi-GPU machine,
// the communication phase is a real ncclAllReduce across N GPUs driven by this one process
// (ncclCommInitAll); the compute phase then runs on every GPU.
#include <thread>
#include <vector>

#include "example_util.h"
#include "spin_kernels.cuh"

#ifdef TANDEM_EXAMPLES_NCCL
#include <nccl.h>
#define NCCL_CHECK(call)                                                                   \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                   ncclGetErrorString(r_));                                                \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
#endif

static const char* kUsage =
    "usage: train-sim [--iterations N | --seconds S] [--compute-kernels K] [--kernel-us U]\n"
    "                 [--comm-us C] [--gap-us G] [--blocks B] [--warmup W] [--report-every R]\n"
    "                 [--mem-mb M] [--gpus N] [--comm-mb M]\n"
    "  Per iteration: K spin kernels of U us (grid B, default 132), a communication phase (an\n"
    "  NCCL-named spin kernel of C us, then the host waits for it), a data-loading gap of G us.\n"
    "  Defaults: 4 kernels x 7 ms compute, 6 ms communication, 6 ms data-loading gap\n"
    "  (30% of each 40 ms iteration is a bubble), 3 warm-up iterations, then 100 iterations.\n"
    "  --mem-mb M: device memory held for the whole run, standing in for weights and optimizer\n"
    "  state (default 128 MiB; 0: none).\n"
    "  --gpus N > 1 with a build using -DTANDEM_EXAMPLES_NCCL=ON: a real ncclAllReduce of M MiB\n"
    "  (default 64) across N GPUs replaces the stand-in kernel.\n"
    "  Output: a JSON line every R iterations (0: none) and a summary JSON line.\n";

int main(int argc, char** argv) {
  Args a{argc, argv, kUsage};
  int iterations = 100, kernels = 4, blocks = 132, warmup = 3, report_every = 0, gpus = 1;
  double seconds = 0, kernel_us = 7000, comm_us = 6000, gap_us = 6000;
  double mem_mb = 128;
  [[maybe_unused]] double comm_mb = 64;  // only an NCCL build uses it
  for (; a.i < argc; ++a.i) {
    std::string f = argv[a.i];
    if (f == "--iterations") iterations = static_cast<int>(a.integer(1, 1000000000));
    else if (f == "--seconds") seconds = a.number(0.01, 1e6);
    else if (f == "--compute-kernels") kernels = static_cast<int>(a.integer(0, 10000));
    else if (f == "--kernel-us") kernel_us = a.number(0, 1e7);
    else if (f == "--comm-us") comm_us = a.number(0, 1e7);
    else if (f == "--gap-us") gap_us = a.number(0, 1e7);
    else if (f == "--blocks") blocks = static_cast<int>(a.integer(1, 1000000));
    else if (f == "--warmup") warmup = static_cast<int>(a.integer(0, 1000000));
    else if (f == "--report-every") report_every = static_cast<int>(a.integer(0, 1000000000));
    else if (f == "--gpus") gpus = static_cast<int>(a.integer(1, 64));
    else if (f == "--comm-mb") comm_mb = a.number(0.001, 65536);
    else if (f == "--mem-mb") mem_mb = a.number(0, 1 << 20);
    else if (f == "--help" || f == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else a.fail("unknown flag " + f);
  }
  auto kernel_ns = static_cast<unsigned long long>(kernel_us * 1000);
  auto comm_ns = static_cast<unsigned long long>(comm_us * 1000);
  auto gap = std::chrono::nanoseconds(static_cast<long long>(gap_us * 1000));

  bool use_nccl = false;
#ifdef TANDEM_EXAMPLES_NCCL
  use_nccl = gpus > 1;
#else
  if (gpus > 1)
    std::fprintf(stderr, "%s: built without NCCL (-DTANDEM_EXAMPLES_NCCL=ON): --gpus %d ignored, "
                 "an NCCL-named kernel stands in for the all-reduce on one GPU\n", argv[0], gpus);
#endif
  int ranks = use_nccl ? gpus : 1;
  if (use_nccl) {
    int have = 0;
    CUDA_CHECK(cudaGetDeviceCount(&have));
    if (have < ranks) {
      std::fprintf(stderr, "%s: --gpus %d but only %d GPU(s) visible\n", argv[0], ranks, have);
      return 2;
    }
  }
  std::vector<cudaStream_t> streams(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[static_cast<size_t>(r)], cudaStreamNonBlocking));
  }
  void* state = nullptr;  // weights and optimizer state, on the first GPU
  auto state_bytes = static_cast<size_t>(mem_mb * 1024 * 1024);
  if (state_bytes) {
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaMalloc(&state, state_bytes));
    CUDA_CHECK(cudaMemsetAsync(state, 0, state_bytes, streams[0]));
  }
#ifdef TANDEM_EXAMPLES_NCCL
  size_t comm_count = static_cast<size_t>(comm_mb * 1024 * 1024 / sizeof(float));
  std::vector<ncclComm_t> comms(static_cast<size_t>(ranks));
  std::vector<float*> bufs(static_cast<size_t>(ranks), nullptr);
  if (use_nccl) {
    for (int r = 0; r < ranks; ++r) {
      CUDA_CHECK(cudaSetDevice(r));
      CUDA_CHECK(cudaMalloc(&bufs[static_cast<size_t>(r)], comm_count * sizeof(float)));
      CUDA_CHECK(cudaMemset(bufs[static_cast<size_t>(r)], 0, comm_count * sizeof(float)));
    }
    NCCL_CHECK(ncclCommInitAll(comms.data(), ranks, nullptr));
  }
#endif

  auto communicate = [&] {
#ifdef TANDEM_EXAMPLES_NCCL
    if (use_nccl) {
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < ranks; ++r) {
        size_t i = static_cast<size_t>(r);
        NCCL_CHECK(ncclAllReduce(bufs[i], bufs[i], comm_count, ncclFloat, ncclSum, comms[i], streams[i]));
      }
      NCCL_CHECK(ncclGroupEnd());
      return;
    }
#endif
    ncclDevKernel_AllReduce_Sum_f32_spin<<<4, 512, 0, streams[0]>>>(comm_ns);  // the collective
  };
  auto iteration = [&] {
    for (int r = 0; r < ranks; ++r) {
      if (ranks > 1) CUDA_CHECK(cudaSetDevice(r));
      for (int k = 0; k < kernels; ++k)
        spin_kernel<<<blocks, 256, 0, streams[static_cast<size_t>(r)]>>>(kernel_ns);
    }
    communicate();
    CUDA_CHECK(cudaGetLastError());
    for (int r = 0; r < ranks; ++r) CUDA_CHECK(cudaStreamSynchronize(streams[static_cast<size_t>(r)]));  // peers
    if (gap.count() > 0) std::this_thread::sleep_for(gap);  // data loading
  };
  for (int i = 0; i < warmup; ++i) iteration();

  auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  int done = 0, last_done = 0;
  while (seconds > 0 ? seconds_since(t0) < seconds : done < iterations) {
    iteration();
    ++done;
    if (report_every && done % report_every == 0) {
      double dt = seconds_since(last);
      std::printf("{\"example\":\"train-sim\",\"iter\":%d,\"iters_per_s\":%.2f,\"elapsed_s\":%.3f}\n", done,
                  (done - last_done) / dt, seconds_since(t0));
      std::fflush(stdout);
      last = std::chrono::steady_clock::now();
      last_done = done;
    }
  }
  double elapsed = seconds_since(t0);
  std::printf(
      "{\"example\":\"train-sim\",\"summary\":true,\"iterations\":%d,\"iters_per_s\":%.3f,\"elapsed_s\":%.3f,"
      "\"compute_us\":%.0f,\"comm_us\":%.0f,\"gap_us\":%.0f,\"comm\":\"%s\",\"gpus\":%d}\n",
      done, done / elapsed, elapsed, kernels * kernel_us, use_nccl ? 0.0 : comm_us, gap_us,
      use_nccl ? "nccl-allreduce" : "nccl-named-spin", ranks);
  std::fflush(stdout);
#ifdef TANDEM_EXAMPLES_NCCL
  if (use_nccl)
    for (int r = 0; r < ranks; ++r) {
      ncclCommDestroy(comms[static_cast<size_t>(r)]);
      CUDA_CHECK(cudaSetDevice(r));
      CUDA_CHECK(cudaFree(bufs[static_cast<size_t>(r)]));
    }
#endif
  if (state) {
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(state));
  }
  return 0;
}
