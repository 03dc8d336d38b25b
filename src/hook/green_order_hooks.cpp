// The hooks of green_stream_ops.def: each issues its call where the work of its stream is
// (green_streams.h), or brings that work back first. Bodies only; the list is the .def.
// A parameter is a local: the stream argument is replaced before the call passes it on.
#include "capture_state.h"
#include "collective_waits.h"
#include "green_streams.h"
#include "hooks.h"
#include "progress.h"
#include "real_driver.h"

namespace tandem::hook {

#define GREEN_OP(symbol, params, args, stream, per_thread) \
  CUresult hook_##symbol params noexcept {                 \
    stream = green_op_stream(stream, per_thread);          \
    return g_real.symbol args;                             \
  }
// Training's events behind a collective, and the streams made to wait for them (not in a
// capture: a captured wait holds back the graph's replays, not the stream's later work).
#define GREEN_RECORD_OP(symbol, params, args, stream, per_thread)                            \
  CUresult hook_##symbol params noexcept {                                                   \
    stream = green_op_stream(stream, per_thread);                                            \
    CUresult r = g_real.symbol args;                                                         \
    if (r == CUDA_SUCCESS && g_role == TANDEM_ROLE_TRAINING && !stream_is_capturing(stream, per_thread) && \
        note_event_record(hEvent, stream, per_thread))                                       \
      record_marker_behind_collective(stream, per_thread);                                   \
    return r;                                                                                \
  }
#define GREEN_WAIT_OP(symbol, params, args, stream, per_thread)                                      \
  CUresult hook_##symbol params noexcept {                                                           \
    stream = green_op_stream(stream, per_thread);                                                    \
    CUresult r = g_real.symbol args;                                                                 \
    if (r == CUDA_SUCCESS && g_role == TANDEM_ROLE_TRAINING && !stream_is_capturing(stream, per_thread)) \
      note_stream_wait(stream, hEvent, per_thread);                                                  \
    return r;                                                                                        \
  }
#define GREEN_HOME_OP(symbol, params, args, stream, per_thread) \
  CUresult hook_##symbol params noexcept {                      \
    green_home(stream, per_thread);                             \
    return g_real.symbol args;                                  \
  }
#define GREEN_DEFAULT_OP(symbol, params, args, per_thread) \
  CUresult hook_##symbol params noexcept {                 \
    green_home(nullptr, per_thread);                       \
    return g_real.symbol args;                             \
  }
#include "green_stream_ops.def"
#undef GREEN_OP
#undef GREEN_RECORD_OP
#undef GREEN_WAIT_OP
#undef GREEN_HOME_OP
#undef GREEN_DEFAULT_OP

}  // namespace tandem::hook
