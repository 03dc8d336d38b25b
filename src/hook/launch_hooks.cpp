// Kernel-launch hooks: count each launch by its exact entry point, classify NCCL kernels,
// and leave launches into capturing streams alone. Fast path: no lock, no system call, no
// allocation (kernel_kind() and stream_is_capturing() are lock-free after warm-up).
#include "capture_state.h"
#include "counters.h"
#include "handle_map.h"
#include "hooks.h"
#include "kernel_kind.h"
#include "real_driver.h"

namespace tandem::hook {

namespace {

template <typename Call>
inline CUresult launch_kernel(Entry entry, CUfunction f, CUstream s, bool per_thread_stream,
                              Call&& call) noexcept {
  LaunchCounters& c = launch_counters();
  if (stream_is_capturing(s, per_thread_stream)) {
    count(c.capture_skipped);
    return call();
  }
  CUresult r = call();
  if (__builtin_expect(r == CUDA_SUCCESS, 1)) {
    count(c.by_entry[static_cast<size_t>(entry)]);
    if (kernel_kind(f) == KernelKind::nccl) count(c.nccl);
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
    return call();
  }
  CUresult r = call();
  if (r == CUDA_SUCCESS) {
    uint64_t nodes = graph_exec_kernels().find(reinterpret_cast<uintptr_t>(exec));
    if (nodes == HandleMap::kAbsent) nodes = 0;  // instantiated before tandem saw it
    uint64_t kernels = nodes & 0xffffffffu, nccl = nodes >> 32;
    count(c.by_entry[static_cast<size_t>(entry)]);
    count(c.graph_launches);
    count(c.graph_kernels, kernels);
    if (nccl) count(c.nccl, nccl);
  }
  return r;
}

}  // namespace

CUresult hook_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                             void** extra) noexcept {
  return launch_kernel(Entry::cuLaunchKernel, f, s, false, [&] {
    return g_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
  });
}

CUresult hook_cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                  unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                  CUstream s, void** params, void** extra) noexcept {
  return launch_kernel(Entry::cuLaunchKernel_ptsz, f, s, true, [&] {
    return g_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, smem, s, params, extra);
  });
}

// NCCL launches through cuLaunchKernelEx with its arguments in `extra`; the stream is in the config.
CUresult hook_cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) noexcept {
  CUstream s = config ? config->hStream : nullptr;
  return launch_kernel(Entry::cuLaunchKernelEx, f, s, false,
                       [&] { return g_real.cuLaunchKernelEx(config, f, params, extra); });
}

CUresult hook_cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                    void** extra) noexcept {
  CUstream s = config ? config->hStream : nullptr;
  return launch_kernel(Entry::cuLaunchKernelEx_ptsz, f, s, true,
                       [&] { return g_real.cuLaunchKernelEx_ptsz(config, f, params, extra); });
}

CUresult hook_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                        CUstream s, void** params) noexcept {
  return launch_kernel(Entry::cuLaunchCooperativeKernel, f, s, false, [&] {
    return g_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, smem, s, params);
  });
}

CUresult hook_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz,
                                             unsigned smem, CUstream s, void** params) noexcept {
  return launch_kernel(Entry::cuLaunchCooperativeKernel_ptsz, f, s, true, [&] {
    return g_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, smem, s, params);
  });
}

CUresult hook_cuGraphLaunch(CUgraphExec exec, CUstream s) noexcept {
  return launch_graph(Entry::cuGraphLaunch, exec, s, false,
                      [&] { return g_real.cuGraphLaunch(exec, s); });
}

CUresult hook_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) noexcept {
  return launch_graph(Entry::cuGraphLaunch_ptsz, exec, s, true,
                      [&] { return g_real.cuGraphLaunch_ptsz(exec, s); });
}

}  // namespace tandem::hook
