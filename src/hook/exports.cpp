// The exported C symbols, generated from driver_api.def: programs linked to libcuda.so.1
// resolve them through LD_PRELOAD. Each unpacks nothing and decides nothing: passthrough
// (disabled, or bootstrapping) or the hook body. No exception can cross (hooks are noexcept).
#include "hooks.h"
#include "process.h"
#include "real_driver.h"

#define TANDEM_EXPORT __attribute__((visibility("default")))

extern "C" {
#define HOOK(symbol, params, args)                                           \
  TANDEM_EXPORT CUresult symbol params {                                     \
    if (tandem::hook::passthrough()) return tandem::hook::g_real.symbol args; \
    return tandem::hook::hook_##symbol args;                                 \
  }
#include "driver_api.def"
#undef HOOK
}
