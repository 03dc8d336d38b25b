// The hooks of green_stream_ops.def: each issues its call where the work of its stream is
// (green_streams.h), or brings that work back first. Bodies only; the list is the .def.
// A parameter is a local: the stream argument is replaced before the call passes it on.
#include "green_streams.h"
#include "hooks.h"
#include "real_driver.h"

namespace tandem::hook {

#define GREEN_OP(symbol, params, args, stream, per_thread) \
  CUresult hook_##symbol params noexcept {                 \
    stream = green_op_stream(stream, per_thread);          \
    return g_real.symbol args;                             \
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
#undef GREEN_HOME_OP
#undef GREEN_DEFAULT_OP

}  // namespace tandem::hook
