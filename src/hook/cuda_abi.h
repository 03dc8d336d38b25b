// cuda.h with its renaming macros removed. cuda.h maps API names onto versioned symbols
// (`cuMemAlloc` -> `cuMemAlloc_v2`, `cuGetProcAddress` -> `cuGetProcAddress_v2`); tandem
// names every ABI symbol explicitly, so the macros must not rewrite our definitions.
#pragma once
#include <cuda.h>

#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
#undef cuDeviceTotalMem
#undef cuGetProcAddress
#undef cuGraphInstantiate
#undef cuGraphExecUpdate
#undef cuStreamBeginCapture
#undef cuStreamBeginCaptureToGraph
#undef cuStreamEndCapture
#undef cuStreamIsCapturing
#undef cuLaunchKernel
#undef cuLaunchKernelEx
#undef cuLaunchCooperativeKernel
#undef cuGraphLaunch
#undef cuGraphInstantiateWithParams
#undef cuMemAllocAsync
#undef cuMemFreeAsync
#undef cuMemAllocFromPoolAsync

// Legacy and per-thread-stream symbols that cuda.h declares only for its own build.
extern "C" {
CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags);
}
