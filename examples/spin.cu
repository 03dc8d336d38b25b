// spin: launches kernels that run for a given number of nanoseconds and reports how long
// they took. On a real GPU the kernel busy-waits on %globaltimer; on the simulated GPU a
// "spin" kernel runs exactly its first argument in nanoseconds.
#include <vector>

#include "example_util.h"
#include "spin_kernels.cuh"

static const char* kUsage =
    "usage: spin [--ns N] [--count C] [--blocks B] [--threads T] [--json]\n"
    "  Launches C spin kernels of N ns each (default 1000000 ns, 10 kernels, 132x128) on one\n"
    "  stream and prints the measured time per kernel.\n";

int main(int argc, char** argv) {
  Args a{argc, argv, kUsage};
  unsigned long long ns = 1000000;
  int count = 10, blocks = 132, threads = 128;
  bool json = false;
  for (; a.i < argc; ++a.i) {
    std::string f = argv[a.i];
    if (f == "--ns") ns = static_cast<unsigned long long>(a.number(0, 1e12));
    else if (f == "--count") count = static_cast<int>(a.number(1, 1e7));
    else if (f == "--blocks") blocks = static_cast<int>(a.number(1, 1e6));
    else if (f == "--threads") threads = static_cast<int>(a.number(1, 1024));
    else if (f == "--json") json = true;
    else if (f == "--help" || f == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else a.fail("unknown flag " + f);
  }
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  spin_kernel<<<1, 1, 0, s>>>(1000);  // warm-up: module load
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < count; ++i) spin_kernel<<<blocks, threads, 0, s>>>(ns);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(stop, s));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  double per_kernel_ns = ms * 1e6 / count;
  if (json)
    std::printf("{\"example\":\"spin\",\"kernels\":%d,\"requested_ns\":%llu,\"measured_ns_per_kernel\":%.0f}\n",
                count, ns, per_kernel_ns);
  else
    std::printf("%d kernels of %llu ns: %.0f ns each (%.2f%% off)\n", count, ns, per_kernel_ns,
                ns ? 100.0 * (per_kernel_ns - static_cast<double>(ns)) / static_cast<double>(ns) : 0.0);
  return 0;
}
