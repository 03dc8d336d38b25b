// A CUDA program without a kernel of its own (it only allocates, copies and sets memory), built
// with nvcc's default static runtime: nvcc still registers a fatbin for it, with no kernel in
// it, which the driver must accept (it once answered "device kernel image is invalid").
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e = (call);                                                               \
    if (e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "FAIL %s: %d %s\n", #call, static_cast<int>(e), cudaGetErrorString(e)); \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

int main() {
  char* d = nullptr;
  char out[64] = {};
  const char msg[] = "no kernels here";
  CK(cudaMalloc(&d, 64));
  CK(cudaMemset(d, 'x', 64));
  CK(cudaMemcpy(d, msg, sizeof msg, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(out, d, 64, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  if (std::strcmp(out, msg) != 0 || out[sizeof msg] != 'x') {
    std::fprintf(stderr, "FAIL: copied back '%s'\n", out);
    return 1;
  }
  std::printf("no-kernel program: ok\n");
  return 0;
}
