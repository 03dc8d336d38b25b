// Kernels for the simulated driver's tests, compiled at build time to a cubin, a PTX file and
// a fatbin. Their bodies are never executed by the simulator; names, parameters and globals are
// what the tests look at.
extern "C" __global__ void spin_kernel(unsigned long long ns) {}
extern "C" __global__ void ncclDevKernel_AllReduce_Sum_f32_spin(unsigned long long ns) {}
__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
__device__ __noinline__ float not_a_kernel(float x) { return x * 2.f; }
extern "C" __global__ void uses_helper(float* x) { x[0] = not_a_kernel(x[1]); }
__device__ int sim_counter = 42;
__constant__ float sim_coefficients[8];
extern "C" __global__ void touch_globals(float* x) { x[0] = sim_counter * sim_coefficients[0]; }
