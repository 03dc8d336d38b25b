// infer-sim: inference requests of K kernels, each ended by a host synchronization, either
// back to back (closed loop) or arriving as a Poisson process at a given rate (latency then
// counts queueing from the arrival time), optionally with a burst at a higher rate. Prints
// throughput and p50/p95/p99 latency as JSON. Under tandem it reports each request's arrival
// and end through the client API (tandem_request_begin/end), found with dlsym, unless
// --transparent.
#include <dlfcn.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "example_util.h"
#include "spin_kernels.cuh"

static const char* kUsage =
    "usage: infer-sim [--requests N | --seconds S] [--kernels K] [--kernel-us U] [--blocks B]\n"
    "                 [--closed-loop | --rate R [--burst AT:RATE:SECONDS]] [--seed X]\n"
    "                 [--report-every N] [--mem-mb M] [--transparent] [--warmup-seconds W]\n"
    "                 [--slo-ms L]\n"
    "  Each request is K spin kernels of U us (grid B) on a non-blocking stream, ended by a host\n"
    "  synchronization. Closed loop by default (the next request starts when one ends);\n"
    "  --rate R sends Poisson arrivals at R requests/s (seeded by --seed, default 1) and measures\n"
    "  latency from each arrival, so queueing counts. --burst AT:RATE:SECONDS switches the rate to\n"
    "  RATE at AT seconds for SECONDS (SIRIUS's BURST trace, in small). Defaults: 200 requests of\n"
    "  4 kernels x 500 us.\n"
    "  Output: a JSON line every N requests (0: none) and a summary JSON line with throughput\n"
    "  and p50/p95/p99/mean latency. --mem-mb M: device memory held for the whole run, standing\n"
    "  in for the model's weights (default 64 MiB; 0: none). Under tandem each request's arrival\n"
    "  and end go to tandem_request_begin/end, exact latencies for tandemd's slo policy;\n"
    "  --transparent leaves tandem to see requests as the launches between synchronizations.\n"
    "  --warmup-seconds W: requests arriving in the first W seconds run but are not counted.\n"
    "  --slo-ms L: the summary also gives slo_attainment, the fraction of requests within L ms.\n";

// tandem's client API when the process runs under libtandem.so, else null.
using RequestBegin = unsigned long long (*)(unsigned long long);
using RequestEnd = void (*)(unsigned long long);

static unsigned long long monotonic_ns(std::chrono::steady_clock::time_point t) {
  return static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

static double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int main(int argc, char** argv) {
  Args a{argc, argv, kUsage};
  int requests = 200, kernels = 4, blocks = 132, report_every = 0;
  double seconds = 0, kernel_us = 500, rate = 0, mem_mb = 64;
  unsigned seed = 1;
  double burst_at = -1, burst_rate = 0, burst_seconds = 0;
  bool transparent = false;
  double warmup_s = 0, slo_ms = 0;
  for (; a.i < argc; ++a.i) {
    std::string f = argv[a.i];
    if (f == "--requests") requests = static_cast<int>(a.integer(1, 1000000000));
    else if (f == "--seconds") seconds = a.number(0.01, 1e6);
    else if (f == "--kernels") kernels = static_cast<int>(a.integer(1, 10000));
    else if (f == "--kernel-us") kernel_us = a.number(0, 1e7);
    else if (f == "--blocks") blocks = static_cast<int>(a.integer(1, 1000000));
    else if (f == "--rate") rate = a.number(0.001, 1e7);
    else if (f == "--closed-loop") rate = 0;
    else if (f == "--transparent") transparent = true;
    else if (f == "--warmup-seconds") warmup_s = a.number(0, 1e6);
    else if (f == "--slo-ms") slo_ms = a.number(0.001, 1e9);
    else if (f == "--burst") {
      const char* v = a.value();
      if (std::sscanf(v, "%lf:%lf:%lf", &burst_at, &burst_rate, &burst_seconds) != 3 || burst_at < 0 ||
          burst_rate < 0.001 || burst_seconds <= 0)
        a.fail(std::string("bad value '") + v + "' for --burst (want AT:RATE:SECONDS, e.g. 5:400:3)");
    }
    else if (f == "--mem-mb") mem_mb = a.number(0, 1 << 20);
    else if (f == "--seed") seed = static_cast<unsigned>(a.integer(0, 4294967295LL));
    else if (f == "--report-every") report_every = static_cast<int>(a.integer(0, 1000000000));
    else if (f == "--help" || f == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else a.fail("unknown flag " + f);
  }
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto kernel_ns = static_cast<unsigned long long>(kernel_us * 1000);
  void* weights = nullptr;
  auto weight_bytes = static_cast<size_t>(mem_mb * 1024 * 1024);
  if (weight_bytes) {
    CUDA_CHECK(cudaMalloc(&weights, weight_bytes));
    CUDA_CHECK(cudaMemsetAsync(weights, 0, weight_bytes, s));
  }
  spin_kernel<<<1, 1, 0, s>>>(1000);  // warm-up: module load
  CUDA_CHECK(cudaStreamSynchronize(s));

  if (burst_at >= 0 && rate <= 0) a.fail("--burst needs --rate");
  auto begin_request = transparent ? nullptr : reinterpret_cast<RequestBegin>(dlsym(RTLD_DEFAULT, "tandem_request_begin"));
  auto end_request = transparent ? nullptr : reinterpret_cast<RequestEnd>(dlsym(RTLD_DEFAULT, "tandem_request_end"));
  if (!begin_request || !end_request) begin_request = nullptr, end_request = nullptr;

  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> unit_gap(1.0);  // scaled by the rate at each arrival
  std::vector<double> latencies_ms;
  auto t0 = std::chrono::steady_clock::now();
  double next_arrival = 0;  // seconds since t0
  int done = 0;
  while (seconds > 0 ? seconds_since(t0) < seconds : done < requests) {
    double arrival = seconds_since(t0);
    if (rate > 0) {
      bool bursting = burst_at >= 0 && next_arrival >= burst_at && next_arrival < burst_at + burst_seconds;
      next_arrival += unit_gap(rng) / (bursting ? burst_rate : rate);
      double wait = next_arrival - seconds_since(t0);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      arrival = next_arrival;
    }
    unsigned long long begun = 0;
    if (begin_request)
      begun = begin_request(monotonic_ns(t0) + static_cast<unsigned long long>(arrival * 1e9));
    for (int k = 0; k < kernels; ++k) spin_kernel<<<blocks, 256, 0, s>>>(kernel_ns);
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (end_request) end_request(begun);
    if (arrival >= warmup_s) latencies_ms.push_back((seconds_since(t0) - arrival) * 1e3);
    ++done;
    if (report_every && done % report_every == 0) {
      double now = seconds_since(t0);
      std::printf(
          "{\"example\":\"infer-sim\",\"requests\":%d,\"throughput_rps\":%.3f,\"p50_ms\":%.3f,"
          "\"p95_ms\":%.3f,\"elapsed_s\":%.3f}\n",
          done, done / now, percentile(latencies_ms, 50), percentile(latencies_ms, 95), now);
      std::fflush(stdout);
    }
  }
  double elapsed = seconds_since(t0);
  double mean = 0;
  for (double l : latencies_ms) mean += l;
  if (!latencies_ms.empty()) mean /= static_cast<double>(latencies_ms.size());
  double within = 0;
  for (double l : latencies_ms) within += l <= slo_ms ? 1 : 0;
  double attainment = latencies_ms.empty() ? 0 : within / static_cast<double>(latencies_ms.size());
  std::printf(
      "{\"example\":\"infer-sim\",\"requests\":%d,\"throughput_rps\":%.3f,\"p50_ms\":%.3f,\"p95_ms\":%.3f,"
      "\"p99_ms\":%.3f,\"mean_ms\":%.3f,\"elapsed_s\":%.3f,\"mode\":\"%s\",\"gpu_ms_per_request\":%.3f,"
      "\"counted\":%zu,\"slo_ms\":%.3f,\"slo_attainment\":%.4f,\"request_api\":%s}\n",
      done, done / elapsed, percentile(latencies_ms, 50), percentile(latencies_ms, 95),
      percentile(latencies_ms, 99), mean, elapsed, rate > 0 ? "poisson" : "closed-loop", kernels * kernel_us / 1e3,
      latencies_ms.size(), slo_ms, attainment, begin_request ? "true" : "false");
  if (weights) CUDA_CHECK(cudaFree(weights));
  return 0;
}
