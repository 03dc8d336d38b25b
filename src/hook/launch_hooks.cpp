// Kernel-launch hooks: count each launch by its exact entry point, classify NCCL kernels,
// and leave launches into capturing streams alone. Fast path: no lock, no system call, no
// allocation (kernel_kind() and stream_is_capturing() are lock-free after warm-up).
#include <algorithm>

#include "capture_state.h"
#include "collective_waits.h"
#include "counters.h"
#include "gate.h"
#include "green_streams.h"
#include "job_ranks.h"
#include "kernel_cost.h"
#include "progress.h"
#include "online_requests.h"
#include "handle_map.h"
#include "hooks.h"
#include "kernel_kind.h"
#include "real_driver.h"

namespace tandem::hook {

namespace {

struct Dims {
  unsigned gx, gy, gz, bx, by, bz;
  uint64_t blocks() const { return uint64_t{gx} * gy * gz; }
  uint64_t threads() const { return blocks() * bx * by * bz; }
};

// A graph not timed yet is charged its kernel nodes at this: the process's last kernel estimate.
std::atomic<uint64_t> g_last_cost_ns{kMinKernelCostNs};

// The gate is shut (tokens), so the daemon bounds this process's in-flight work.
inline bool gate_shut() noexcept {
  const tandem_slot* slot = current_slot();
  return slot && __atomic_load_n(&slot->gate, __ATOMIC_RELAXED) != TANDEM_GATE_OPEN;
}

// True when this launch must take tokens: always for batch inference; for training only
// while the daemon gates it (policy slo). An NCCL kernel only when every rank of the job is in
// this process (g_job_local): holding back one rank's collective would stall its peers, holding
// all of them together delays the step, as holding its compute does.
inline bool gated_launch(KernelKind kind) noexcept {
  if (g_role == TANDEM_ROLE_BATCH_INFERENCE) return true;
  return g_role == TANDEM_ROLE_TRAINING && (!is_nccl(kind) || g_job_local) && gate_shut();
}

inline bool bounded_inflight() noexcept {
  const tandem_slot* slot = current_slot();
  return slot && __atomic_load_n(&slot->inflight_bound_ns, __ATOMIC_RELAXED) != 0;
}

// A process with a role tells the daemon what it launches; a gated one first takes tokens
// for `cost` (ns of estimated GPU work). Before the launch: the context is published once for
// the progress thread; in training, the work queued before an NCCL kernel gets a completion
// marker, so the collective is a bubble.
inline void before_managed_launch(KernelKind kind, CUstream s, bool per_thread, bool gated, uint64_t cost) noexcept {
  if (__builtin_expect(!g_notes.context.load(std::memory_order_relaxed), 0)) {
    CUcontext ctx = nullptr;
    if (g_real.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx) g_notes.context.store(ctx, std::memory_order_release);
  }
  if (gated) gate_take(cost, s, per_thread);
  if (g_role == TANDEM_ROLE_INFERENCE) {
    request_launch();
  } else if (g_role == TANDEM_ROLE_TRAINING && is_nccl(kind) &&
             g_notes.work_since_marker.load(std::memory_order_relaxed)) {
    record_marker_before_collective(green_op_stream(s, per_thread), per_thread);  // where the stream's work is
  }
}

inline void after_managed_launch(KernelKind kind, CUstream s, bool per_thread, uint64_t kernels) noexcept {
  if (!current_slot()) return;
  tandem_client_page* page = current_page();
  bool nccl = is_nccl(kind);
  if (!nccl && collective_ahead_of(s, per_thread))
    note_queued_launches(kernels);  // behind a collective: busy once it is over (collective_waits.h)
  else
    __atomic_fetch_add(nccl ? &page->nccl_launches : &page->launches, kernels, __ATOMIC_RELAXED);
  g_notes.last_was_nccl.store(nccl, std::memory_order_relaxed);
  if (nccl) {
    note_collective_issued();
    g_notes.nccl_stream.store(s, std::memory_order_relaxed);
    g_notes.nccl_per_thread.store(per_thread, std::memory_order_relaxed);
    g_notes.nccl_since_marker.store(true, std::memory_order_relaxed);
    // A collective's NCCL marker tells tandemd a collective is in flight; one behind only
    // point-to-point kernels (a receive waiting for its peer) is an ordinary bubble's.
    if (kind == KernelKind::nccl) g_notes.collective_since_marker.store(true, std::memory_order_relaxed);
  } else {
    g_notes.last_stream.store(s, std::memory_order_relaxed);
    g_notes.last_per_thread.store(per_thread, std::memory_order_relaxed);
    g_notes.work_since_marker.store(true, std::memory_order_relaxed);
    record_marker_if_wanted(s, per_thread);  // the tick's marker, where only this thread can put it
  }
}

template <typename Call>
inline CUresult launch_kernel(Entry entry, CUfunction f, CUstream s, bool per_thread_stream, Dims d,
                              Call&& call) noexcept {
  LaunchCounters& c = launch_counters();
  if (stream_is_capturing(s, per_thread_stream)) {
    count(c.capture_skipped);
    return call(s);
  }
  KernelKind kind = kernel_kind(f);
  bool managed = g_role != TANDEM_ROLE_NONE;
  bool gated = managed && gated_launch(kind);
  int sample = -1;
  if (managed) {
    ShapeCharge charge{0, false};
    uintptr_t key = 0;
    if (gated) {
      // One probe of the shape's learned cost, which also says whether this launch is timed
      // (kernel_cost.h: the fast path of a filler's launch).
      key = kernel_cost_key(f, d.blocks());
      charge = kernel_charge(key, d.threads());
      g_last_cost_ns.store(charge.ns, std::memory_order_relaxed);
    }
    before_managed_launch(kind, s, per_thread_stream, gated, charge.ns);
    if (is_nccl(kind) && g_job_grouped) collective_take();
    // Training while a request runs: to a green context's stream (green_streams.h).
    s = green_launch_stream(s, per_thread_stream, !is_nccl(kind));
    // After the gate: the timing starts when the kernel may run, not while it waits for tokens.
    if (__builtin_expect(charge.timed, 0)) sample = cost_sample_claim(key, d.threads(), s, per_thread_stream, current_slot());
  }
  CUresult r = call(s);
  cost_sample_end(sample, s, per_thread_stream, r == CUDA_SUCCESS);
  if (__builtin_expect(r == CUDA_SUCCESS, 1)) {
    count(c.by_entry[static_cast<size_t>(entry)]);
    if (is_nccl(kind)) count(c.nccl);
    if (is_nccl(kind) && g_job_grouped) collective_launched();
    if (managed) after_managed_launch(kind, s, per_thread_stream, 1);
    if (g_role == TANDEM_ROLE_INFERENCE) note_request_blocks(d.blocks());
    // A kernel of a filler whose in-flight work is bounded (its gate shut: beside training, or
    // policy slo) gets a marker right behind it, on its own stream. A marker covers only
    // its stream's work, yet it says complete all that was issued before it: the progress
    // thread's one marker per tick, on the last stream used, let a launcher with a stream per
    // thread (DataLoader-fed servers, Triton) look finished while its other streams' kernels
    // still waited, so the daemon granted past the in-flight bound (8 threads: training 0.73-0.86
    // of Exclusive). Markers complete in order, so with one behind every gated kernel what
    // was issued before a completed marker has run. Under policy slo a bounded launch also
    // sees its completion when it happens, without waiting for a tick.
    if (gated && gate_shut() && (bounded_inflight() || g_role == TANDEM_ROLE_BATCH_INFERENCE))
      record_marker_now(s, per_thread_stream);
  }
  return r;
}

// Graph exec values in graph_exec_kernels(): low 32 bits kernel nodes, high 32 bits NCCL nodes.
template <typename Call>
inline CUresult launch_graph(Entry entry, CUgraphExec exec, CUstream s, bool per_thread_stream,
                             Call&& call) noexcept {
  LaunchCounters& c = launch_counters();
  if (stream_is_capturing(s, per_thread_stream)) {
    count(c.capture_skipped);
    return call(s);
  }
  uint64_t nodes = graph_exec_kernels().find(reinterpret_cast<uintptr_t>(exec));
  if (nodes == HandleMap::kAbsent) nodes = 0;  // instantiated before tandem saw it
  uint64_t kernels = nodes & 0xffffffffu, nccl = nodes >> 32;
  bool managed = g_role != TANDEM_ROLE_NONE;
  int sample = -1;
  // A graph is charged as one piece of work: its learned GPU time once a replay was timed,
  // before that its kernel nodes at the process's recent kernel estimate.
  if (managed) {
    bool gated = gated_launch(KernelKind::compute);
    uintptr_t key = graph_cost_key(exec);
    ShapeCharge charge{0, false};
    if (gated) {
      charge = graph_charge(key);
      if (!charge.ns) charge.ns = std::max<uint64_t>(kernels, 1) * g_last_cost_ns.load(std::memory_order_relaxed);
    }
    before_managed_launch(KernelKind::compute, s, per_thread_stream, gated, charge.ns);
    // Whole, to where its stream's work is: a graph's kernels run in the context they were
    // captured in, so a green stream would not confine them (green_streams.h).
    s = green_launch_stream(s, per_thread_stream, false);
    if (charge.timed) sample = cost_sample_claim(key, 0, s, per_thread_stream, current_slot());
  }
  CUresult r = call(s);
  cost_sample_end(sample, s, per_thread_stream, r == CUDA_SUCCESS);
  if (r == CUDA_SUCCESS) {
    if (managed && kernels > nccl) after_managed_launch(KernelKind::compute, s, per_thread_stream, kernels - nccl);
    // As behind a gated kernel: the replay's completion is seen as soon as it happens.
    if (sample >= 0 || (managed && gated_launch(KernelKind::compute) && gate_shut())) record_marker_now(s, per_thread_stream);
    count(c.by_entry[static_cast<size_t>(entry)]);
    count(c.graph_launches);
    count(c.graph_kernels, kernels);
    if (nccl) count(c.nccl, nccl);
  }
  return r;
}

Dims ex_dims(const CUlaunchConfig* c) noexcept {
  if (!c) return Dims{1, 1, 1, 1, 1, 1};
  return Dims{c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ};
}

}  // namespace

CUresult hook_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                             void** extra) noexcept {
  return launch_kernel(Entry::cuLaunchKernel, f, s, false, Dims{gx, gy, gz, bx, by, bz}, [&](CUstream st) {
    return g_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, st, params, extra);
  });
}

CUresult hook_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                  unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                  CUstream s, void** params, void** extra) noexcept {
  return launch_kernel(Entry::cuLaunchKernel_ptsz, f, s, true, Dims{gx, gy, gz, bx, by, bz}, [&](CUstream st) {
    return g_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, smem, st, params, extra);
  });
}

// NCCL launches through cuLaunchKernelEx with its arguments in `extra`; the stream is in the config.
CUresult hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) noexcept {
  CUstream s = config ? config->hStream : nullptr;
  return launch_kernel(Entry::cuLaunchKernelEx, f, s, false, ex_dims(config),
                       [&](CUstream st) {
                         CUlaunchConfig copy;
                         return g_real.cuLaunchKernelEx(with_stream(config, st, copy), f, params, extra);
                       });
}

CUresult hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                    void** extra) noexcept {
  CUstream s = config ? config->hStream : nullptr;
  return launch_kernel(Entry::cuLaunchKernelEx_ptsz, f, s, true, ex_dims(config),
                       [&](CUstream st) {
                         CUlaunchConfig copy;
                         return g_real.cuLaunchKernelEx_ptsz(with_stream(config, st, copy), f, params, extra);
                       });
}

CUresult hook_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                        CUstream s, void** params) noexcept {
  return launch_kernel(Entry::cuLaunchCooperativeKernel, f, s, false, Dims{gx, gy, gz, bx, by, bz}, [&](CUstream st) {
    return g_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, smem, st, params);
  });
}

CUresult hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz,
                                             unsigned smem, CUstream s, void** params) noexcept {
  return launch_kernel(Entry::cuLaunchCooperativeKernel_ptsz, f, s, true, Dims{gx, gy, gz, bx, by, bz}, [&](CUstream st) {
    return g_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, smem, st, params);
  });
}

CUresult hook_cuGraphLaunch(CUgraphExec exec, CUstream s) noexcept {
  return launch_graph(Entry::cuGraphLaunch, exec, s, false,
                      [&](CUstream st) { return g_real.cuGraphLaunch(exec, st); });
}

CUresult hook_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) noexcept {
  return launch_graph(Entry::cuGraphLaunch_ptsz, exec, s, true,
                      [&](CUstream st) { return g_real.cuGraphLaunch_ptsz(exec, st); });
}

}  // namespace tandem::hook
