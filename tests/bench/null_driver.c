/* A driver whose cuLaunchKernel returns at once: isolates the cost tandem adds to a launch
 * from the driver's own cost. Used only by the launch-overhead benchmark. */
#include <cuda.h>

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream s, void** params,
                        void** extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)smem; (void)s;
  (void)params; (void)extra;
  return CUDA_SUCCESS;
}

/* Just enough for a registered process (the progress thread's calls), so the launch path can
 * be measured through an open gate. */
static int g_dummy;
CUresult cuCtxGetCurrent(CUcontext* ctx) { *ctx = (CUcontext)&g_dummy; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice* dev) { *dev = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  (void)dev;
  for (int i = 0; i < 16; ++i) uuid->bytes[i] = (char)(0x40 + i);
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent* ev, unsigned int flags) { (void)flags; *ev = (CUevent)&g_dummy; return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent ev, CUstream s) { (void)ev; (void)s; return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent ev) { (void)ev; return CUDA_SUCCESS; }
/* Timing events, so a filler's cost model learns its kernel shapes (kernel_cost.h) as it does on
 * a GPU: without them every launch was a shape never timed (timed and polled at each launch),
 * not the steady state of a filler whose shapes are known. Every kernel "takes" 2 us. */
static CUresult elapsed_ms(float* ms, CUevent start, CUevent end) {
  (void)start; (void)end;
  *ms = 0.002f;
  return CUDA_SUCCESS;
}
/* cuda.h may name cuEventElapsedTime_v2 as cuEventElapsedTime: both symbols, each once. */
#undef cuEventElapsedTime
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) { return elapsed_ms(ms, start, end); }
CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) { return elapsed_ms(ms, start, end); }
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) { (void)mode; return CUDA_SUCCESS; }
