// Declarations of every hook body, generated from driver_api.def. Each is defined once in
// the file of its family; the exported C wrappers (exports.cpp) call them.
#pragma once
#include "cuda_abi.h"

namespace tandem::hook {
#define HOOK(symbol, params, args) CUresult hook_##symbol params noexcept;
#include "driver_api.def"
#undef HOOK
}  // namespace tandem::hook
