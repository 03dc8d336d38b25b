// Kernels shared by the examples. On a real GPU they busy-wait on %globaltimer for the given
// number of nanoseconds; on the simulated GPU a kernel whose name contains "spin" and whose
// first argument is a 64-bit count runs exactly that long. The NCCL-named one stands in for a
// collective when no multi-GPU NCCL build is used (tandem classifies kernels by name).
#pragma once
#include <cstdint>

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void spin_kernel(unsigned long long ns) {
  unsigned long long start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}

// A framework's many small kernels (a layer norm, a bias add on a small tensor): one block,
// almost no work. Not named "spin": the simulated GPU charges it as a kernel of one wave.
extern "C" __global__ void small_kernel(unsigned long long tag) {
  if (tag == ~0ull && threadIdx.x == 0) asm volatile("");  // never true: keeps the argument
}

// A framework's large kernels (an element-wise pass over a large tensor): many blocks, each
// thread one element. Its time follows its grid (the simulated GPU: waves of blocks).
extern "C" __global__ void elementwise_kernel(float* x, unsigned long long n) {
  unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.5f + 1.0f;
}

extern "C" __global__ void ncclDevKernel_AllReduce_Sum_f32_spin(unsigned long long ns) {
  unsigned long long start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}
