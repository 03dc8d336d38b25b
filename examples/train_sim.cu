// train-sim: a data-parallel-style training loop. Each iteration runs compute kernels, then a
// communication phase (an NCCL-named kernel standing in for the all-reduce, plus the host
// waiting for it, as a rank waits for its peers), then a host "data-loading" gap. Prints
// iterations/s as JSON lines.
#include <thread>

#include "example_util.h"
#include "spin_kernels.cuh"

static const char* kUsage =
    "usage: train-sim [--iterations N | --seconds S] [--compute-kernels K] [--kernel-us U]\n"
    "                 [--comm-us C] [--gap-us G] [--blocks B] [--warmup W] [--report-every R]\n"
    "  Defaults: 4 kernels x 7 ms compute, 6 ms communication, 6 ms data-loading gap\n"
    "  (30% of each 40 ms iteration is a bubble), 100 iterations.\n";

int main(int argc, char** argv) {
  Args a{argc, argv, kUsage};
  int iterations = 100, kernels = 4, blocks = 132, warmup = 3, report_every = 0;
  double seconds = 0, kernel_us = 7000, comm_us = 6000, gap_us = 6000;
  for (; a.i < argc; ++a.i) {
    std::string f = argv[a.i];
    if (f == "--iterations") iterations = static_cast<int>(a.number(1, 1e9));
    else if (f == "--seconds") seconds = a.number(0.01, 1e6);
    else if (f == "--compute-kernels") kernels = static_cast<int>(a.number(1, 10000));
    else if (f == "--kernel-us") kernel_us = a.number(0, 1e7);
    else if (f == "--comm-us") comm_us = a.number(0, 1e7);
    else if (f == "--gap-us") gap_us = a.number(0, 1e7);
    else if (f == "--blocks") blocks = static_cast<int>(a.number(1, 1e6));
    else if (f == "--warmup") warmup = static_cast<int>(a.number(0, 1e6));
    else if (f == "--report-every") report_every = static_cast<int>(a.number(0, 1e9));
    else if (f == "--help" || f == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else a.fail("unknown flag " + f);
  }
  cudaStream_t compute;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  auto kernel_ns = static_cast<unsigned long long>(kernel_us * 1000);
  auto comm_ns = static_cast<unsigned long long>(comm_us * 1000);
  auto gap = std::chrono::nanoseconds(static_cast<long long>(gap_us * 1000));

  auto iteration = [&] {
    for (int k = 0; k < kernels; ++k) spin_kernel<<<blocks, 256, 0, compute>>>(kernel_ns);
    ncclDevKernel_AllReduce_Sum_f32_spin<<<4, 512, 0, compute>>>(comm_ns);  // the collective
    CUDA_CHECK(cudaStreamSynchronize(compute));                              // wait for peers
    if (gap.count() > 0) std::this_thread::sleep_for(gap);                   // data loading
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
      "\"compute_us\":%.0f,\"comm_us\":%.0f,\"gap_us\":%.0f}\n",
      done, done / elapsed, elapsed, kernels * kernel_us, comm_us, gap_us);
  return 0;
}
