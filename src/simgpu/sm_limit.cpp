// SM limits and the client's priority under MPS (SIMGPU_SHARING=mps): what a real MPS client gets from
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (the whole process, read when the driver starts) or from
// an execution affinity at context creation (cuCtxCreate_v3/_v4 with CU_EXEC_AFFINITY_TYPE_SM_COUNT,
// one context). A kernel of such a context occupies at most its SMs and takes longer in
// proportion: its blocks run in more waves. Without MPS a real GPU refuses an affinity and
// ignores the percentage; so does this one. Both are fixed for a context's life, as on a GPU.
// Green contexts (green_contexts.cpp) limit the kernels of their streams, with or without MPS;
// inside an MPS client whose percentage is below 100 the client's SMs apply instead.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "sim.h"

namespace simgpu {

// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as MPS reads it: a percentage of the GPU's SMs, rounded up.
int process_sm_limit() {
  static const int limit = [] {
    const char* v = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (!v || !*v || !settings().mps) return 0;
    char* end = nullptr;
    double pct = std::strtod(v, &end);
    if (end == v || *end || !(pct > 0 && pct <= 100)) {
      log(1, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='%s' is not a percentage in (0, 100]: ignored", v);
      return 0;
    }
    int sms = static_cast<int>(std::ceil(pct * settings().sms / 100.0));
    log(2, "MPS active thread percentage %g: kernels use at most %d of %d SMs", pct, sms, settings().sms);
    return sms;
  }();
  return limit;
}

int mps_client_priority() {
  const char* v = std::getenv("CUDA_MPS_CLIENT_PRIORITY");
  if (!v || !*v || !settings().mps) return 0;
  if ((v[0] == '0' || v[0] == '1') && !v[1]) return v[0] - '0';
  log(1, "CUDA_MPS_CLIENT_PRIORITY='%s' is not 0 (normal) or 1 (below normal): ignored", v);
  return 0;
}

int sm_limit(const Context* ctx) {
  if (!settings().mps) return settings().sms;
  if (ctx && ctx->sm_limit > 0) return ctx->sm_limit;
  int p = process_sm_limit();
  return p > 0 ? p : settings().sms;
}

const GreenContext* kernel_green_context(const Context* ctx, const Stream* s) {
  // The NULL stream of a green context's converted context is the green context's default stream.
  if (s && s->green) return s->green;
  return s && s->default_stream && ctx ? ctx->green : nullptr;
}

int kernel_sm_limit(const Context* ctx, const Stream* s, const GreenContext* captured) {
  const GreenContext* green = captured ? captured : kernel_green_context(ctx, s);
  int mps = process_sm_limit();
  if (green && (mps == 0 || mps >= settings().sms)) return static_cast<int>(green->sms);
  return sm_limit(ctx);
}

void fit_to_sm_limit(unsigned limit, unsigned* sms, uint64_t* duration_ns) {
  if (limit == 0 || *sms <= limit) return;
  *duration_ns = static_cast<uint64_t>(static_cast<double>(*duration_ns) * *sms / limit);
  *sms = limit;
}

}  // namespace simgpu

using namespace simgpu;

// The affinities of cuCtxCreate_v3 / _v4: the SM count they ask for (0: none), or an error.
static CUresult affinity_sms(const CUexecAffinityParam* params, int count, int* limit) {
  *limit = 0;
  for (int i = 0; params && i < count; ++i) {
    if (params[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    if (!settings().mps) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;  // only MPS clients can be limited
    unsigned v = params[i].param.smCount.val;
    if (v == 0) return CUDA_ERROR_INVALID_VALUE;
    *limit = static_cast<int>(std::min<unsigned>(v, static_cast<unsigned>(settings().sms)));
  }
  return CUDA_SUCCESS;
}

static CUresult create_limited(CUcontext* ctx, const CUexecAffinityParam* params, int count, unsigned flags, CUdevice dev) {
  int limit = 0;
  if (CUresult r = affinity_sms(params, count, &limit); r != CUDA_SUCCESS) return r;
  CUresult r = cuCtxCreate_v2(ctx, flags, dev);
  if (r == CUDA_SUCCESS && limit) reinterpret_cast<Context*>(*ctx)->sm_limit = limit;
  return r;
}

extern "C" CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int count, unsigned flags, CUdevice dev);
SIM_API CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int count, unsigned flags, CUdevice dev) {
  return create_limited(ctx, params, count, flags, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned flags, CUdevice dev) {
  if (params && params->cigParams) return CUDA_ERROR_NOT_SUPPORTED;
  return create_limited(ctx, params ? params->execAffinityParams : nullptr, params ? params->numExecAffinityParams : 0,
                        flags, dev);
}

SIM_API CUresult cuCtxGetExecAffinity(CUexecAffinityParam* param, CUexecAffinityType type) {
  if (!param) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  Context* c = current_context();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  param->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  param->param.smCount.val = static_cast<unsigned>(sm_limit(c));
  return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetExecAffinitySupport(int* supported, CUexecAffinityType type, CUdevice dev) {
  if (!supported) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *supported = settings().mps && type == CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  return CUDA_SUCCESS;
}
