// Hooks of the capture family: keep g_open_captures right so launches can skip the query.
#include "capture_state.h"
#include "green_streams.h"
#include "hooks.h"
#include "real_driver.h"

namespace tandem::hook {

std::atomic<int> g_open_captures{0};

bool stream_is_capturing_slow(CUstream s, bool per_thread_stream) noexcept {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = per_thread_stream ? g_real.cuStreamIsCapturing_ptsz(s, &status)
                                 : g_real.cuStreamIsCapturing(s, &status);
  // The legacy stream while another stream captures in global mode: treat as capturing.
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  return r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

namespace {

CUresult began(CUresult r) noexcept {
  if (r == CUDA_SUCCESS) g_open_captures.fetch_add(1, std::memory_order_relaxed);
  return r;
}

// EndCapture closes the capture even when it fails (an invalidated capture), so count by the
// stream's state before the call.
template <typename Call>
CUresult end_capture(CUstream s, bool per_thread_stream, Call&& call) noexcept {
  bool was_capturing = stream_is_capturing_slow(s, per_thread_stream);
  CUresult r = call();
  if (was_capturing && g_open_captures.load() > 0) g_open_captures.fetch_sub(1);
  return r;
}

}  // namespace

// A capture begins on the stream itself: its work is brought back from a green stream first.
CUresult hook_cuStreamBeginCapture(CUstream s) noexcept {
  green_home(s, false);
  return began(g_real.cuStreamBeginCapture(s));
}
CUresult hook_cuStreamBeginCapture_ptsz(CUstream s) noexcept {
  green_home(s, true);
  return began(g_real.cuStreamBeginCapture_ptsz(s));
}
CUresult hook_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) noexcept {
  green_home(s, false);
  return began(g_real.cuStreamBeginCapture_v2(s, mode));
}
CUresult hook_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) noexcept {
  green_home(s, true);
  return began(g_real.cuStreamBeginCapture_v2_ptsz(s, mode));
}
CUresult hook_cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps,
                                          const CUgraphEdgeData* edges, size_t n,
                                          CUstreamCaptureMode mode) noexcept {
  green_home(s, false);
  return began(g_real.cuStreamBeginCaptureToGraph(s, g, deps, edges, n, mode));
}
CUresult hook_cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* deps,
                                               const CUgraphEdgeData* edges, size_t n,
                                               CUstreamCaptureMode mode) noexcept {
  green_home(s, true);
  return began(g_real.cuStreamBeginCaptureToGraph_ptsz(s, g, deps, edges, n, mode));
}
CUresult hook_cuStreamEndCapture(CUstream s, CUgraph* graph) noexcept {
  return end_capture(s, false, [&] { return g_real.cuStreamEndCapture(s, graph); });
}
CUresult hook_cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) noexcept {
  return end_capture(s, true, [&] { return g_real.cuStreamEndCapture_ptsz(s, graph); });
}

}  // namespace tandem::hook
