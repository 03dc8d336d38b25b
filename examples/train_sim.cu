// train-sim: a data-parallel-style training loop. Each iteration runs compute kernels, then a
// communication phase (an NCCL-named kernel standing in for the all-reduce, plus the host
// waiting for it, as a rank waits for its peers), then a host "data-loading" gap. Prints
// iterations/s as JSON lines.
//
// With --sample-mb M, each of the batch's samples holds M MiB of activations and the batch is as
// large as memory allows (at most --batch N); with --elastic it follows the memory tandem gives
// it: when tandem's memory-pressure callback asks, it frees samples at once, as SIRIUS's instant
// adjustment does: in the compute phase it discards the batch that is running (the kernels in
// flight end, the iteration starts again with the smaller batch), in the data-loading gap it
// just frees. It regrows at an iteration boundary when cudaMemGetInfo shows room for a sample.
//
// With --activations-mb M, memory rises and falls within each iteration as in real training
// (Zico's case, docs/zico.md): the forward pass allocates M MiB of activations in K parts, one
// before each compute kernel, and a backward pass of K more kernels frees them in reverse
// order; the host waits for each kernel, so the memory follows the GPU's progress.
//
// Built with -DTANDEM_EXAMPLES_NCCL=ON and run with --gpus N (N > 1) on a multi-GPU machine,
// the communication phase is a real ncclAllReduce across N GPUs driven by this one process
// (ncclCommInitAll); the compute phase then runs on every GPU.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
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
    "                 [--mem-mb M] [--gpus N] [--comm-mb M] [--batch N] [--sample-mb M] [--elastic]\n"
    "                 [--activations-mb M] [--optimizer-us O]\n"
    "  Per iteration: K spin kernels of U us (grid B, default 132), a communication phase (an\n"
    "  NCCL-named spin kernel of C us, then the host waits for it), a data-loading gap of G us.\n"
    "  Defaults: 4 kernels x 7 ms compute, 6 ms communication, 6 ms data-loading gap\n"
    "  (30% of each 40 ms iteration is a bubble), 3 warm-up iterations, then 100 iterations.\n"
    "  --mem-mb M: device memory held for the whole run, standing in for weights and optimizer\n"
    "  state (default 128 MiB; 0: none).\n"
    "  --batch N: samples per iteration at most (default 1); the compute kernels' time is for a full\n"
    "  batch, a smaller batch takes its share. --sample-mb M: device memory per sample (default 0);\n"
    "  the batch starts as large as fits (cudaMemGetInfo). --elastic: follow tandem's memory:\n"
    "  shrink when its memory-pressure callback asks (discarding the running batch), regrow when\n"
    "  a sample fits again.\n"
    "  --activations-mb M: a forward pass of K kernels allocating M/K MiB before each, then a\n"
    "  backward pass of K kernels freeing them in reverse order, the host waiting for each kernel.\n"
    "  Out of memory there: a JSON line with \"error\":\"out of memory\" and exit status 3.\n"
    "  --optimizer-us O: data parallelism's order: the collective runs on a stream of its own after\n"
    "  the compute (an event between them), the compute stream waits for it (cudaStreamWaitEvent),\n"
    "  and an optimizer kernel of O us is queued there behind it, as DDP queues its optimizer step\n"
    "  behind the gradients' all-reduce; the host then waits for the optimizer. One GPU.\n"
    "  --gpus N > 1 with a build using -DTANDEM_EXAMPLES_NCCL=ON: a real ncclAllReduce of M MiB\n"
    "  (default 64) across N GPUs replaces the stand-in kernel.\n"
    "  Output: a JSON line every R iterations (0: none) and a summary JSON line.\n";

// tandem's client API (include/tandem/client.h) when the process runs under libtandem.so.
using PressureFn = void (*)(unsigned long long quota_bytes, unsigned long long in_use_bytes, void* user);
using OnMemoryPressure = int (*)(PressureFn, void*);
using ReportRelease = void (*)(unsigned long long);

// What tandem asked this process to give up: set on tandem's progress thread, taken by the
// training loop at its next safe point (between two compute kernels or in the gap), where it
// waits for the kernels in flight before it frees.
static std::atomic<unsigned long long> g_asked_bytes{0};

static void on_memory_pressure(unsigned long long quota, unsigned long long in_use, void*) {
  if (in_use > quota) g_asked_bytes.store(in_use - quota);
}

// The batch's activations: one allocation per sample, so a sample's memory can be returned.
struct Batch {
  size_t sample_bytes = 0;  // 0: the batch holds no memory of its own and stays at max
  int max = 1;
  cudaStream_t stream = nullptr;
  std::vector<void*> samples;
  int shrinks = 0, grows = 0;
  unsigned long long released = 0;

  int size() const { return sample_bytes ? static_cast<int>(samples.size()) : max; }
  // One more sample when cudaMemGetInfo (under tandem: the quota) says it fits.
  bool grow_one() {
    if (!sample_bytes || size() >= max) return false;
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess || free_bytes < sample_bytes) return false;
    void* p = nullptr;
    if (cudaMalloc(&p, sample_bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory after all: try again later
      return false;
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, sample_bytes, stream));  // the forward pass writes it
    samples.push_back(p);
    return true;
  }
  // Frees samples until `bytes` are returned, keeping one. The bytes freed.
  unsigned long long shrink(unsigned long long bytes) {
    unsigned long long freed = 0;
    while (freed < bytes && samples.size() > 1) {
      CUDA_CHECK(cudaFree(samples.back()));
      samples.pop_back();
      freed += sample_bytes;
    }
    if (freed) ++shrinks, released += freed;
    return freed;
  }
  void free_all() {
    for (void* p : samples) CUDA_CHECK(cudaFree(p));
    samples.clear();
  }
};

int main(int argc, char** argv) {
  Args a{argc, argv, kUsage};
  int iterations = 100, kernels = 4, blocks = 132, warmup = 3, report_every = 0, gpus = 1;
  double seconds = 0, kernel_us = 7000, comm_us = 6000, gap_us = 6000, optimizer_us = 0;
  double mem_mb = 128, sample_mb = 0, activations_mb = 0;
  int max_batch = 1;
  bool elastic = false;
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
    else if (f == "--batch") max_batch = static_cast<int>(a.integer(1, 100000));
    else if (f == "--sample-mb") sample_mb = a.number(0, 1 << 20);
    else if (f == "--elastic") elastic = true;
    else if (f == "--activations-mb") activations_mb = a.number(0, 1 << 20);
    else if (f == "--optimizer-us") optimizer_us = a.number(0, 1e7);
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
  if (optimizer_us > 0 && ranks > 1) a.fail("--optimizer-us runs on one GPU");
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

  Batch batch;
  batch.sample_bytes = static_cast<size_t>(sample_mb * 1024 * 1024);
  batch.max = max_batch;
  batch.stream = streams[0];
  CUDA_CHECK(cudaSetDevice(0));
  while (batch.grow_one()) {
  }
  if (batch.sample_bytes && batch.size() == 0) {
    std::fprintf(stderr, "%s: no room for one sample of %.0f MiB\n", argv[0], sample_mb);
    return 1;
  }
  auto report_release = reinterpret_cast<ReportRelease>(dlsym(RTLD_DEFAULT, "tandem_report_release"));
  if (elastic) {
    auto on_pressure = reinterpret_cast<OnMemoryPressure>(dlsym(RTLD_DEFAULT, "tandem_on_memory_pressure"));
    if (!on_pressure || on_pressure(on_memory_pressure, nullptr) != 0)
      std::fprintf(stderr, "%s: --elastic without tandem (libtandem.so not loaded or disabled): the batch "
                   "only grows\n", argv[0]);
  }
  // Gives back what tandem asked for, once the kernels in flight have ended. False: nothing
  // asked, or nothing to free (one sample left: the batch goes on rather than start again).
  auto give_back = [&] {
    unsigned long long asked = elastic ? g_asked_bytes.exchange(0) : 0;
    if (!asked) return false;
    CUDA_CHECK(cudaStreamSynchronize(streams[0]));
    unsigned long long freed = batch.shrink(asked);
    if (freed && report_release) report_release(freed);
    return freed != 0;
  };
  // At an iteration boundary: give back what tandem asked for, or take one more sample.
  auto follow_memory = [&] {
    if (elastic && !give_back() && batch.grow_one()) ++batch.grows;
  };
  // The data-loading gap; an elastic batch answers tandem in it, 1 ms at a time.
  auto data_loading = [&] {
    if (!elastic) {
      std::this_thread::sleep_for(gap);
      return;
    }
    auto end = std::chrono::steady_clock::now() + gap;
    for (auto now = std::chrono::steady_clock::now(); now < end; now = std::chrono::steady_clock::now()) {
      give_back();
      std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(end - now, std::chrono::milliseconds(1)));
    }
  };
  // An elastic batch keeps at most two compute kernels queued, so that a request waits for
  // those alone (not for a whole compute phase queued ahead).
  cudaEvent_t launched[2] = {nullptr, nullptr};
  if (elastic)
    for (auto& e : launched) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  int discards = 0;

  // --optimizer-us: the collective's own stream and the events between it and the compute.
  cudaStream_t comm_stream = nullptr;
  cudaEvent_t gradients_ready = nullptr, reduced = nullptr;
  auto optimizer_ns = static_cast<unsigned long long>(optimizer_us * 1000);
  if (optimizer_ns) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&gradients_ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&reduced, cudaEventDisableTiming));
  }
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
    if (!comm_stream) {
      ncclDevKernel_AllReduce_Sum_f32_spin<<<4, 512, 0, streams[0]>>>(comm_ns);  // the collective
      return;
    }
    CUDA_CHECK(cudaEventRecord(gradients_ready, streams[0]));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream, gradients_ready, 0));
    ncclDevKernel_AllReduce_Sum_f32_spin<<<4, 512, 0, comm_stream>>>(comm_ns);
    CUDA_CHECK(cudaEventRecord(reduced, comm_stream));
    CUDA_CHECK(cudaStreamWaitEvent(streams[0], reduced, 0));
    spin_kernel<<<blocks, 256, 0, streams[0]>>>(optimizer_ns);  // queued behind the collective
  };
  // Forward: an activation before each kernel; backward: freed in reverse, one per kernel.
  auto activation_bytes = static_cast<size_t>(activations_mb * 1024 * 1024);
  size_t part_bytes = kernels ? (activation_bytes / static_cast<size_t>(kernels) + 511) / 512 * 512 : 0;
  std::vector<void*> activations;
  auto forward_backward = [&](unsigned long long ns) {
    cudaStream_t st = streams[0];
    for (int k = 0; k < kernels; ++k) {
      void* p = nullptr;
      if (cudaMalloc(&p, part_bytes) != cudaSuccess) {
        std::printf("{\"example\":\"train-sim\",\"error\":\"out of memory\",\"activations_held_mb\":%.1f}\n",
                    static_cast<double>(activations.size() * part_bytes) / (1 << 20));
        std::fflush(stdout);
        std::exit(3);
      }
      activations.push_back(p);
      CUDA_CHECK(cudaMemsetAsync(p, 0, part_bytes, st));  // the layer writes its activations
      spin_kernel<<<blocks, 256, 0, st>>>(ns);
      CUDA_CHECK(cudaStreamSynchronize(st));
    }
    for (int k = 0; k < kernels; ++k) {
      spin_kernel<<<blocks, 256, 0, st>>>(ns);
      CUDA_CHECK(cudaStreamSynchronize(st));
      CUDA_CHECK(cudaFree(activations.back()));
      activations.pop_back();
    }
  };
  // One iteration; false when tandem asked for memory during its compute phase and the batch
  // was discarded (its samples not trained on; the next call starts it again, smaller).
  auto iteration = [&] {
    follow_memory();
    // A smaller batch computes its share of the full batch's time.
    auto ns = kernel_ns * static_cast<unsigned long long>(batch.size()) / static_cast<unsigned long long>(max_batch);
    if (activation_bytes && kernels) {
      forward_backward(ns);
    } else if (elastic && ranks == 1) {
      for (int k = 0; k < kernels; ++k) {
        if (k >= 2) CUDA_CHECK(cudaEventSynchronize(launched[k % 2]));
        if (give_back()) {
          ++discards;
          return false;
        }
        spin_kernel<<<blocks, 256, 0, streams[0]>>>(ns);
        CUDA_CHECK(cudaEventRecord(launched[k % 2], streams[0]));
      }
    } else {
      for (int r = 0; r < ranks; ++r) {
        if (ranks > 1) CUDA_CHECK(cudaSetDevice(r));
        for (int k = 0; k < kernels; ++k)
          spin_kernel<<<blocks, 256, 0, streams[static_cast<size_t>(r)]>>>(ns);
      }
    }
    communicate();
    CUDA_CHECK(cudaGetLastError());
    for (int r = 0; r < ranks; ++r) CUDA_CHECK(cudaStreamSynchronize(streams[static_cast<size_t>(r)]));  // peers
    if (gap.count() > 0) data_loading();
    return true;
  };
  for (int i = 0; i < warmup; ++i) iteration();

  auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  int done = 0, last_done = 0;
  long long samples = 0, last_samples = 0;
  int batch_min = batch.size(), batch_max = batch.size();
  while (seconds > 0 ? seconds_since(t0) < seconds : done < iterations) {
    if (!iteration()) continue;
    ++done;
    samples += batch.size();
    batch_min = std::min(batch_min, batch.size());
    batch_max = std::max(batch_max, batch.size());
    if (report_every && done % report_every == 0) {
      double dt = seconds_since(last);
      std::printf("{\"example\":\"train-sim\",\"iter\":%d,\"iters_per_s\":%.2f,\"samples_per_s\":%.2f,"
                  "\"batch\":%d,\"elapsed_s\":%.3f}\n",
                  done, (done - last_done) / dt, static_cast<double>(samples - last_samples) / dt, batch.size(),
                  seconds_since(t0));
      std::fflush(stdout);
      last = std::chrono::steady_clock::now();
      last_done = done;
      last_samples = samples;
    }
  }
  double elapsed = seconds_since(t0);
  std::printf(
      "{\"example\":\"train-sim\",\"summary\":true,\"iterations\":%d,\"iters_per_s\":%.3f,\"elapsed_s\":%.3f,"
      "\"compute_us\":%.0f,\"comm_us\":%.0f,\"gap_us\":%.0f,\"comm\":\"%s\",\"gpus\":%d,"
      "\"samples_per_s\":%.3f,\"batch_max\":%d,\"batch_mean\":%.2f,\"batch_low\":%d,\"batch_high\":%d,"
      "\"sample_mb\":%.0f,\"elastic\":%s,\"shrinks\":%d,\"grows\":%d,\"discards\":%d,\"released_mb\":%.0f,"
      "\"activations_mb\":%.0f}\n",
      done, done / elapsed, elapsed, kernels * kernel_us, use_nccl ? 0.0 : comm_us, gap_us,
      use_nccl ? "nccl-allreduce" : "nccl-named-spin", ranks, static_cast<double>(samples) / elapsed, max_batch,
      done ? static_cast<double>(samples) / done : 0.0, batch_min, batch_max, sample_mb, elastic ? "true" : "false",
      batch.shrinks, batch.grows, discards, static_cast<double>(batch.released) / (1 << 20), activations_mb);
  std::fflush(stdout);
#ifdef TANDEM_EXAMPLES_NCCL
  if (use_nccl)
    for (int r = 0; r < ranks; ++r) {
      ncclCommDestroy(comms[static_cast<size_t>(r)]);
      CUDA_CHECK(cudaSetDevice(r));
      CUDA_CHECK(cudaFree(bufs[static_cast<size_t>(r)]));
    }
#endif
  CUDA_CHECK(cudaSetDevice(0));
  for (auto e : launched)
    if (e) CUDA_CHECK(cudaEventDestroy(e));
  batch.free_all();
  if (state) {
    CUDA_CHECK(cudaFree(state));
  }
  return 0;
}
