// Kernel launches, every variant. Arguments are not interpreted except the first 8 bytes of
// the first one, which a spin kernel uses as its duration in nanoseconds.
#include <cstring>

#include "sim.h"

extern "C" CUresult cuEventRecord_ptsz(CUevent e, CUstream s);  // cuda.h declares it in per-thread mode only

namespace simgpu {
namespace {

uint64_t first_argument(void** params, void** extra) {
  uint64_t v = 0;
  if (params && params[0]) {
    std::memcpy(&v, params[0], sizeof v);
  } else if (extra) {
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER && e[1]) {
        std::memcpy(&v, e[1], sizeof v);
        break;
      }
    }
  }
  return v;
}

// NCCL passes its ncclDevKernelArgs as one buffer (CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE); the
// buffer is NCCL's to reuse once the launch returns, so collectives.cpp reads a copy.
std::shared_ptr<const std::vector<unsigned char>> argument_buffer(void** extra) {
  const unsigned char* buffer = nullptr;
  size_t size = 0;
  for (void** e = extra; e && *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<const unsigned char*>(e[1]);
    else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1]) std::memcpy(&size, e[1], sizeof size);
  }
  if (!buffer || size == 0 || size > (64 << 10)) return nullptr;
  return std::make_shared<const std::vector<unsigned char>>(buffer, buffer + size);
}

CUresult launch(const char* api, CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                CUstream s, void** params, void** extra, bool per_thread) {
  if (should_fail(api)) return injected_error(api);
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Function* fn = as_function(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 || block[2] == 0 ||
      static_cast<uint64_t>(block[0]) * block[1] * block[2] > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (smem > static_cast<unsigned>(fn->max_dynamic_smem.load())) return CUDA_ERROR_INVALID_VALUE;  // limits.cpp
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  Op op;
  op.kind = Op::kernel;
  op.launch.fn = fn;
  std::memcpy(op.launch.grid, grid, sizeof op.launch.grid);
  std::memcpy(op.launch.block, block, sizeof op.launch.block);
  op.launch.smem = smem;
  op.launch.first_arg = first_argument(params, extra);
  if (fn->mix && params && params[1] && params[2]) {  // (ns, uint64_t* word, uint64_t value)
    std::memcpy(&op.launch.mix_word, params[1], sizeof op.launch.mix_word);
    std::memcpy(&op.launch.mix_value, params[2], sizeof op.launch.mix_value);
    if (!valid_device_range(reinterpret_cast<CUdeviceptr>(op.launch.mix_word), sizeof(uint64_t)))
      return CUDA_ERROR_INVALID_VALUE;  // an illegal address on a GPU: refused here
  }
  if (fn->nccl) op.launch.args = argument_buffer(extra);
  CUdevice dev = 0;
  cuCtxGetDevice(&dev);
  op.launch.device = dev;
  op.launch.green = kernel_green_context(current_context(), st);
  op.launch.sm_limit = static_cast<unsigned>(kernel_sm_limit(current_context(), st));
  return submit(st, op);
}

// cuLaunchKernelEx's attributes: a launch-completion event (NCCL's implicit launch order) is
// recorded right before the kernel, so it completes when the kernel starts; the others
// (clusters, memory-synchronisation domains, scheduling hints) change nothing here.
CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool per_thread) {
  if (!c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
  unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
  unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) continue;
    CUevent ev = c->attrs[i].value.launchCompletionEvent.event;
    CUresult r = per_thread ? cuEventRecord_ptsz(ev, c->hStream) : cuEventRecord(ev, c->hStream);
    if (r != CUDA_SUCCESS) return r;
  }
  return launch("cuLaunchKernelEx", f, grid, block, c->sharedMemBytes, c->hStream, params, extra, per_thread);
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;

#define LAUNCH_PARAMS                                                                         \
  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
   unsigned smem, CUstream s, void** params, void** extra)
#define COOP_PARAMS                                                                           \
  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
   unsigned smem, CUstream s, void** params)

SIM_API CUresult cuLaunchKernel LAUNCH_PARAMS {
  const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  return launch("cuLaunchKernel", f, g, b, smem, s, params, extra, false);
}
SIM_API CUresult cuLaunchKernel_ptsz LAUNCH_PARAMS {
  const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  return launch("cuLaunchKernel", f, g, b, smem, s, params, extra, true);
}
SIM_API CUresult cuLaunchCooperativeKernel COOP_PARAMS {
  const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  return launch("cuLaunchCooperativeKernel", f, g, b, smem, s, params, nullptr, false);
}
SIM_API CUresult cuLaunchCooperativeKernel_ptsz COOP_PARAMS {
  const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  return launch("cuLaunchCooperativeKernel", f, g, b, smem, s, params, nullptr, true);
}
SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  return launch_ex(c, f, params, extra, false);
}
SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  return launch_ex(c, f, params, extra, true);
}
