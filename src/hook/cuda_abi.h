// The driver API as the hook names it: exact ABI symbols (see cuda_abi_names.h).
#pragma once
#include "cuda_abi_names.h"

// Legacy and per-thread-stream symbols that cuda.h declares only for its own build.
extern "C" {
CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags);
}
