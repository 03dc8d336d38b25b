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

extern "C" __global__ void ncclDevKernel_AllReduce_Sum_f32_spin(unsigned long long ns) {
  unsigned long long start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}
