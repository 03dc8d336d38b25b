// spin: launches kernels that run for a given number of nanoseconds and reports how long
// they took. On a real GPU the kernel busy-waits on %globaltimer; on the simulated GPU a
// "spin" kernel runs exactly its first argument in nanoseconds.
#include "example_util.h"
#include "spin_kernels.cuh"

static const char* kUsage =
    "usage: spin [--ns N] [--count C] [--blocks B] [--threads T] [--stream-per-thread] [--json]\n"
    "  Launches C spin kernels of N ns each (default 1000000 ns, 10 kernels, 132x128) back to\n"
    "  back on one stream (a non-blocking stream, or cudaStreamPerThread with\n"
    "  --stream-per-thread) and prints the measured time per kernel: host wall time from the\n"
    "  first launch to the end of the synchronization, and GPU time between two events.\n";

int main(int argc, char** argv) {
  Args a{argc, argv, kUsage};
  unsigned long long ns = 1000000;
  int count = 10, blocks = 132, threads = 128;
  bool json = false, per_thread = false;
  for (; a.i < argc; ++a.i) {
    std::string f = argv[a.i];
    if (f == "--ns") ns = static_cast<unsigned long long>(a.integer(0, 1000000000000LL));
    else if (f == "--count") count = static_cast<int>(a.integer(1, 10000000));
    else if (f == "--blocks") blocks = static_cast<int>(a.integer(1, 1000000));
    else if (f == "--threads") threads = static_cast<int>(a.integer(1, 1024));
    else if (f == "--stream-per-thread") per_thread = true;
    else if (f == "--json") json = true;
    else if (f == "--help" || f == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else a.fail("unknown flag " + f);
  }
  cudaStream_t s = cudaStreamPerThread;
  if (!per_thread) CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  spin_kernel<<<1, 1, 0, s>>>(1000);  // warm-up: module load
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(s));

  auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < count; ++i) spin_kernel<<<blocks, threads, 0, s>>>(ns);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaEventRecord(stop, s));
  CUDA_CHECK(cudaEventSynchronize(stop));
  double wall_ns = seconds_since(t0) * 1e9 / count;
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  double event_ns = static_cast<double>(ms) * 1e6 / count;
  auto off = [&](double x) { return ns ? 100.0 * (x - static_cast<double>(ns)) / static_cast<double>(ns) : 0.0; };
  if (json)
    std::printf(
        "{\"example\":\"spin\",\"kernels\":%d,\"requested_ns\":%llu,\"measured_ns_per_kernel\":%.0f,"
        "\"wall_ns_per_kernel\":%.0f,\"event_ns_per_kernel\":%.0f,\"blocks\":%d,\"threads\":%d,"
        "\"stream\":\"%s\"}\n",
        count, ns, wall_ns, wall_ns, event_ns, blocks, threads, per_thread ? "per-thread" : "non-blocking");
  else
    std::printf("%d kernels of %llu ns: %.0f ns each by wall clock (%+.2f%%), %.0f ns by events (%+.2f%%)\n", count,
                ns, wall_ns, off(wall_ns), event_ns, off(event_ns));
  if (!per_thread) CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
