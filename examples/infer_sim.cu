// infer-sim: inference requests of K kernels, each ended by a host synchronization, either
// back to back (closed loop) or arriving as a Poisson process at a given rate (latency then
// counts queueing from the arrival time), optionally with a burst at a higher rate. Prints
// throughput and p50/p95/p99 latency as JSON. Under tandem it reports each request's arrival
// and end through the client API (tandem_request_begin/end), found with dlsym, unless
// --transparent.
//
// With --models N it serves N "models" whose weights (--model-mb) are loaded on a model's first
// request (allocated and written: a cold start, in the request's latency), released after
// --idle-ms without requests (SIRIUS's T_idle) and evicted least-recently-used first when
// another model needs the memory. --trace light|burst draws the request rate of each interval
// as SIRIUS's LIGHT and BURST traces do; requests go to the models uniformly.
//
// With --threads N, N host threads each run closed-loop requests on a stream of their own: a
// multi-threaded launcher, as servers fed by several threads (DataLoader workers, Triton's
// model instances) are.
//
// With --small-kernels N a request also has N tiny kernels, each after --host-us of host work,
// spread between its large kernels: the launch pattern of a framework (PyTorch: tens of small
// kernels with Python between them, a few large ones), which a filler's cost model must get
// right.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "duration.h"
#include "example_util.h"
#include "spin_kernels.cuh"

static const char* kUsage =
    "usage: infer-sim [--requests N | --seconds S] [--kernels K] [--kernel-us U] [--blocks B]\n"
    "                 [--closed-loop | --rate R [--burst AT:RATE:SECONDS]] [--seed X]\n"
    "                 [--report-every N] [--mem-mb M] [--transparent] [--warmup-seconds W]\n"
    "                 [--slo-ms L] [--models N [--model-mb M] [--idle-ms T]]\n"
    "                 [--trace light|burst [--interval-s S]] [--threads N] [--device D]\n"
    "                 [--small-kernels N [--host-us H]] [--graph] [--no-sync] [--hog-memory]\n"
    "                 [--elementwise N]\n"
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
    "  --slo-ms L: the summary also gives slo_attainment, the fraction of requests within L ms.\n"
    "  --models N: N models of M MiB (default 64) each, requested uniformly; a model is loaded on\n"
    "  its first request (a cold start), released after T ms without requests (default:\n"
    "  TANDEM_MEM_IDLE_MS, else 30000) and evicted least recently used first when memory runs out.\n"
    "  --trace light|burst: Poisson arrivals whose rate is drawn for each interval of S seconds\n"
    "  (default 20) as in SIRIUS: light LogNormal(1, 1) requests/s; burst 30% of intervals\n"
    "  LogNormal(4.5, 0.3), the others light.\n"
    "  --threads N: N host threads (default 1), each running closed-loop requests on its own\n"
    "  stream; not with --rate, --trace, --models or --report-every.\n"
    "  --device D: run on CUDA device D (an ordinal among those CUDA_VISIBLE_DEVICES shows).\n"
    "  --small-kernels N: also N one-block kernels per request, spread between the K kernels, each\n"
    "  launched after H us (default 20) of host work: a framework's launch pattern.\n"
    "  --graph: each request replays one CUDA graph captured from its kernels. --no-sync: requests\n"
    "  are launched without waiting for them (a queue only the GPU drains; the run's last one is\n"
    "  waited for). --hog-memory: take every byte of device memory still free at start, held to the\n"
    "  end (hogged_mb in the summary). --elementwise N: the K kernels are element-wise passes over\n"
    "  N floats (N/256 blocks, a thread an element, as a framework's large layers) instead of spin\n"
    "  kernels; their time follows their grid (simulated GPU: 2 us a wave of 132 blocks).\n";

// tandem's client API when the process runs under libtandem.so, else null.
using RequestBegin = unsigned long long (*)(unsigned long long);
using RequestEnd = void (*)(unsigned long long);

static unsigned long long monotonic_ns(std::chrono::steady_clock::time_point t) {
  return static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

// SIRIUS's request-rate traces (§6.1): the timeline in intervals, each with a rate drawn from a
// LogNormal distribution (LIGHT: mu 1, sigma 1, about 3.4 requests/s on average; HEAVY: mu 4.5,
// sigma 0.3, about 98; BURST: 30% of intervals HEAVY, the others LIGHT).
struct RateTrace {
  enum Kind { none, light, burst } kind = none;
  double interval_s = 20;
  std::mt19937_64 rng;
  std::vector<double> rates;  // per interval, drawn as the run reaches it
  double at(double t) {
    auto i = static_cast<size_t>(t / interval_s);
    std::lognormal_distribution<double> low(1.0, 1.0), high(4.5, 0.3);
    std::bernoulli_distribution heavy(0.3);
    while (rates.size() <= i) rates.push_back(kind == burst && heavy(rng) ? high(rng) : low(rng));
    return std::max(rates[i], 0.01);
  }
};

// The models' weights. Under tandem's memory pool a load takes memory from training (docs/memory.md);
// a release gives it back.
struct Models {
  size_t bytes = 0;
  double idle_s = 30;
  cudaStream_t stream = nullptr;
  struct Model {
    void* weights = nullptr;
    double last_used_s = 0;
  };
  std::vector<Model> all;
  int cold_starts = 0, evictions = 0, idle_releases = 0, loaded_high = 0;
  std::vector<double> load_ms;

  int loaded() const {
    return static_cast<int>(std::count_if(all.begin(), all.end(), [](const Model& m) { return m.weights; }));
  }
  void unload(Model& m) {
    CUDA_CHECK(cudaFree(m.weights));
    m.weights = nullptr;
  }
  // Loads model k if it is not (allocate, write the weights), evicting the least recently used
  // others while memory is short. False when even that leaves no room.
  bool ensure(size_t k) {
    if (all[k].weights) return true;
    auto start = std::chrono::steady_clock::now();
    void* p = nullptr;
    while (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      Model* lru = nullptr;
      for (Model& m : all)
        if (m.weights && (!lru || m.last_used_s < lru->last_used_s)) lru = &m;
      if (!lru) return false;
      unload(*lru);
      ++evictions;
    }
    CUDA_CHECK(cudaMemsetAsync(p, 1, bytes, stream));  // the upload of the weights
    CUDA_CHECK(cudaStreamSynchronize(stream));
    all[k].weights = p;
    ++cold_starts;
    load_ms.push_back(seconds_since(start) * 1e3);
    loaded_high = std::max(loaded_high, loaded());
    return true;
  }
  // Releases the models not requested for idle_s. Seconds until the next one would be.
  double release_idle(double now_s) {
    double next = std::numeric_limits<double>::infinity();
    for (Model& m : all) {
      if (!m.weights) continue;
      double left = m.last_used_s + idle_s - now_s;
      if (left <= 0) {
        unload(m);
        ++idle_releases;
      } else {
        next = std::min(next, left);
      }
    }
    return next;
  }
};

// One request's kernels on `s`: K large ones, with the small ones (and the host work before
// each) spread between them; or, with --graph, one replay of a graph captured from them.
struct RequestShape {
  int kernels, blocks, small_kernels;
  unsigned long long kernel_ns;
  double host_us;
  float* elements = nullptr;         // --elementwise: the large kernels' buffer
  unsigned long long element_count = 0;
  bool sync = true;                  // --no-sync: false
  cudaGraphExec_t graph = nullptr;   // --graph
  // One request: its work, then (unless --no-sync) the host waits for it.
  void run(cudaStream_t s) const {
    if (graph) CUDA_CHECK(cudaGraphLaunch(graph, s));
    else launch(s);
    if (sync) CUDA_CHECK(cudaStreamSynchronize(s));
  }
  unsigned element_blocks() const { return static_cast<unsigned>((element_count + 255) / 256); }
  void size_elementwise(unsigned long long n) {
    element_count = n;
    CUDA_CHECK(cudaMalloc(&elements, element_count * sizeof(float)));
  }
  void capture(cudaStream_t s) {
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch(s);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&graph, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  void launch(cudaStream_t s) const {
    for (int k = 0; k < kernels; ++k) {
      if (elements) elementwise_kernel<<<element_blocks(), 256, 0, s>>>(elements, element_count);
      else spin_kernel<<<blocks, 256, 0, s>>>(kernel_ns);
      int smalls = small_kernels / kernels + (k < small_kernels % kernels ? 1 : 0);
      for (int j = 0; j < smalls; ++j) {
        auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(host_us);
        while (std::chrono::steady_clock::now() < until) {
        }
        small_kernel<<<16, 256, 0, s>>>(static_cast<unsigned long long>(j));
      }
    }
  }
};

// --threads N: each thread creates its own stream and runs closed-loop requests until the run's
// end (--seconds) or until N threads together have started `requests`. Returns the requests
// done; their latencies are appended to `latencies_ms`.
static int run_threads(int threads, double seconds, int requests, const RequestShape& shape,
                       RequestBegin begin_request, RequestEnd end_request,
                       std::chrono::steady_clock::time_point t0, double warmup_s, std::vector<double>& latencies_ms) {
  std::atomic<int> started{0}, done{0};
  std::mutex merge;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      cudaStream_t s;
      CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      std::vector<double> mine;
      while (seconds > 0 ? seconds_since(t0) < seconds : started.fetch_add(1) < requests) {
        double arrival = seconds_since(t0);
        unsigned long long begun = begin_request ? begin_request(0) : 0;
        shape.run(s);
        if (end_request) end_request(begun);
        if (arrival >= warmup_s) mine.push_back((seconds_since(t0) - arrival) * 1e3);
        done.fetch_add(1);
      }
      CUDA_CHECK(cudaStreamSynchronize(s));  // --no-sync: the queue drains before the end
      CUDA_CHECK(cudaStreamDestroy(s));
      std::lock_guard<std::mutex> lock(merge);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
    });
  for (std::thread& w : workers) w.join();
  return done.load();
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
  int model_count = 0, threads = 1, small_kernels = 0;
  double host_us = 20;
  bool no_sync = false, use_graph = false, hog_memory = false;
  unsigned long long elementwise = 0;
  double model_mb = 64, idle_ms = 30000;
  if (const char* t = std::getenv("TANDEM_MEM_IDLE_MS")) {
    // As libtandem reads its time settings: milliseconds, fractions allowed, or with a unit;
    // the range is the settings table's.
    tandem::DurationSpec spec{tandem::kNsPerMs, 0, 86400 * tandem::kNsPerS, 1};
    tandem::DurationResult d = tandem::parse_duration(t, spec);
    if (d.ok()) idle_ms = static_cast<double>(d.ns) / 1e6;
    else std::fprintf(stderr, "infer-sim: TANDEM_MEM_IDLE_MS='%s' is not valid (%s; accepted: 0 to 86400s); using 30000\n",
                      t, tandem::duration_error_text(d.error));
  }
  RateTrace trace;
  int device = 0;
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
    else if (f == "--models") model_count = static_cast<int>(a.integer(0, 100000));
    else if (f == "--model-mb") model_mb = a.number(1, 1 << 20);
    else if (f == "--idle-ms") idle_ms = a.number(0, 1e9);
    else if (f == "--interval-s") trace.interval_s = a.number(0.01, 1e6);
    else if (f == "--trace") {
      std::string v = a.value();
      if (v == "light") trace.kind = RateTrace::light;
      else if (v == "burst") trace.kind = RateTrace::burst;
      else a.fail("bad value '" + v + "' for --trace (want light or burst)");
    }
    else if (f == "--threads") threads = static_cast<int>(a.integer(1, 1024));
    else if (f == "--small-kernels") small_kernels = static_cast<int>(a.integer(0, 100000));
    else if (f == "--host-us") host_us = a.number(0, 1e6);
    else if (f == "--no-sync") no_sync = true;
    else if (f == "--elementwise") elementwise = static_cast<unsigned long long>(a.integer(256, 1LL << 32));
    else if (f == "--graph") use_graph = true;
    else if (f == "--hog-memory") hog_memory = true;
    else if (f == "--device") device = static_cast<int>(a.integer(0, 1023));
    else if (f == "--seed") seed = static_cast<unsigned>(a.integer(0, 4294967295LL));
    else if (f == "--report-every") report_every = static_cast<int>(a.integer(0, 1000000000));
    else if (f == "--help" || f == "-h") {
      std::printf("%s", kUsage);
      return 0;
    } else a.fail("unknown flag " + f);
  }
  CUDA_CHECK(cudaSetDevice(device));
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
  if (trace.kind != RateTrace::none && rate > 0) a.fail("--trace and --rate exclude each other");
  if (threads > 1 && (rate > 0 || trace.kind != RateTrace::none || model_count || report_every))
    a.fail("--threads runs closed-loop requests: not with --rate, --trace, --models or --report-every");
  trace.rng.seed(seed + 1);  // rates apart from arrivals: the same trace whatever the arrivals draw
  Models models;
  models.bytes = static_cast<size_t>(model_mb * 1024 * 1024);
  models.idle_s = idle_ms / 1e3;
  models.stream = s;
  models.all.resize(static_cast<size_t>(model_count));
  std::mt19937_64 model_rng(seed + 2);  // apart from arrivals: --models leaves the arrival times as they were
  std::uniform_int_distribution<size_t> pick_model(0, model_count ? static_cast<size_t>(model_count) - 1 : 0);
  int failed = 0;
  auto begin_request = transparent ? nullptr : reinterpret_cast<RequestBegin>(dlsym(RTLD_DEFAULT, "tandem_request_begin"));
  auto end_request = transparent ? nullptr : reinterpret_cast<RequestEnd>(dlsym(RTLD_DEFAULT, "tandem_request_end"));
  if (!begin_request || !end_request) begin_request = nullptr, end_request = nullptr;

  bool open_loop = rate > 0 || trace.kind != RateTrace::none;
  RequestShape shape{kernels, blocks, small_kernels, kernel_ns, host_us};
  shape.sync = !no_sync;
  if (elementwise) shape.size_elementwise(elementwise);
  if ((no_sync || use_graph) && (model_count || open_loop))
    a.fail("--no-sync and --graph run closed-loop requests: not with --rate, --trace or --models");
  if (use_graph) shape.capture(s);
  // --hog-memory: every byte cudaMalloc still gives, in halving steps, held to the end.
  std::vector<void*> hogged;
  double hogged_mb = 0;
  for (size_t step = size_t{1} << 30; hog_memory && step >= (size_t{2} << 20);) {
    void* p = nullptr;
    if (cudaMalloc(&p, step) == cudaSuccess) {
      hogged.push_back(p);
      hogged_mb += static_cast<double>(step) / (1 << 20);
    } else {
      (void)cudaGetLastError();
      step /= 2;
    }
  }

  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> unit_gap(1.0);  // scaled by the rate at each arrival
  std::vector<double> latencies_ms;
  auto t0 = std::chrono::steady_clock::now();
  double next_arrival = 0;  // seconds since t0
  int done = 0;
  if (threads > 1)
    done = run_threads(threads, seconds, requests, shape, begin_request, end_request, t0, warmup_s, latencies_ms);
  while (threads == 1 && (seconds > 0 ? seconds_since(t0) < seconds : done < requests)) {
    double arrival = seconds_since(t0);
    if (open_loop) {
      bool bursting = burst_at >= 0 && next_arrival >= burst_at && next_arrival < burst_at + burst_seconds;
      next_arrival += unit_gap(rng) / (trace.kind != RateTrace::none ? trace.at(next_arrival)
                                        : bursting                      ? burst_rate
                                                                        : rate);
      // Idle models go while waiting, on time: their memory is what training gets back. A
      // request due after the end of the run is not waited for.
      bool after_end = seconds > 0 && next_arrival >= seconds;
      double until = after_end ? seconds : next_arrival;
      for (double wait; (wait = until - seconds_since(t0)) > 0;)
        std::this_thread::sleep_for(std::chrono::duration<double>(
            std::min(wait, models.release_idle(seconds_since(t0)) + 1e-4)));
      if (after_end) break;
      arrival = next_arrival;
    }
    models.release_idle(seconds_since(t0));
    // The model first (a cold start is memory and an upload, not work that waits for a
    // bubble), then the request as tandem sees it, from its arrival: its latency includes the load.
    size_t model = models.all.empty() ? 0 : pick_model(model_rng);
    bool served = models.all.empty() || models.ensure(model);
    unsigned long long begun = 0;
    if (begin_request)
      begun = begin_request(monotonic_ns(t0) + static_cast<unsigned long long>(arrival * 1e9));
    if (served) {
      shape.run(s);
      if (!models.all.empty()) models.all[model].last_used_s = seconds_since(t0);
    }
    if (end_request) end_request(begun);
    if (!served) ++failed;  // no memory for the model: answered with an error
    else if (arrival >= warmup_s) latencies_ms.push_back((seconds_since(t0) - arrival) * 1e3);
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
  CUDA_CHECK(cudaStreamSynchronize(s));  // --no-sync: the queue drains before the end
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
      "\"counted\":%zu,\"slo_ms\":%.3f,\"slo_attainment\":%.4f,\"request_api\":%s,\"failed\":%d,"
      "\"models\":%d,\"model_mb\":%.0f,\"cold_starts\":%d,\"load_p50_ms\":%.3f,\"load_max_ms\":%.3f,"
      "\"evictions\":%d,\"idle_releases\":%d,\"loaded_high\":%d,\"small_kernels\":%d,\"synchronized\":%s,"
      "\"graph\":%s,\"hogged_mb\":%.0f}\n",
      done, done / elapsed, percentile(latencies_ms, 50), percentile(latencies_ms, 95),
      percentile(latencies_ms, 99), mean, elapsed,
      trace.kind == RateTrace::light ? "trace-light"
      : trace.kind == RateTrace::burst ? "trace-burst"
      : rate > 0                       ? "poisson"
                                       : "closed-loop",
      kernels * kernel_us / 1e3, latencies_ms.size(), slo_ms, attainment, begin_request ? "true" : "false", failed,
      model_count, model_count ? model_mb : 0.0, models.cold_starts, percentile(models.load_ms, 50),
      models.load_ms.empty() ? 0.0 : *std::max_element(models.load_ms.begin(), models.load_ms.end()),
      models.evictions, models.idle_releases, models.loaded_high, small_kernels, no_sync ? "false" : "true",
      use_graph ? "true" : "false", hogged_mb);
  for (void* p : hogged) CUDA_CHECK(cudaFree(p));
  if (shape.graph) CUDA_CHECK(cudaGraphExecDestroy(shape.graph));
  if (shape.elements) CUDA_CHECK(cudaFree(shape.elements));
  for (auto& m : models.all)
    if (m.weights) models.unload(m);
  if (weights) CUDA_CHECK(cudaFree(weights));
  return 0;
}
