// A plain nvcc program (static cudart, nvcc's default) against the simulated driver: memory,
// copies, memset, launches, streams, events, capture and graph replay, device queries.
// Kernel bodies are not executed by the simulator, so data checks use copies and memsets.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, e_,    \
                   cudaGetErrorString(e_));                                      \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
__global__ void spin_kernel(long long ns) {}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (count < 1) return 1;
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s cc %d.%d sms %d mem %zu\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem);
  if (prop.major != 9 || prop.multiProcessorCount != 132) return 2;

  const int n = 1 << 16;
  std::vector<float> h(n), back(n);
  for (int i = 0; i < n; ++i) h[i] = float(i);
  float *d = nullptr, *d2 = nullptr;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  CHECK(cudaMalloc(&d2, n * sizeof(float)));
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d2, d, n * sizeof(float), cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back.data(), d2, n * sizeof(float), cudaMemcpyDeviceToHost));
  if (std::memcmp(back.data(), h.data(), n * sizeof(float))) return 3;
  CHECK(cudaMemset(d, 0, n * sizeof(float)));
  CHECK(cudaMemcpy(back.data(), d, sizeof(float) * 4, cudaMemcpyDeviceToHost));
  if (back[3] != 0.f) return 4;

  scale<<<(n + 255) / 256, 256>>>(d, 2.f, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  cudaStream_t s1, s2;
  CHECK(cudaStreamCreate(&s1));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a, s1));
  spin_kernel<<<1, 1, 0, s1>>>(2000000);  // 2 ms
  CHECK(cudaMemcpyAsync(d2, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s1));
  CHECK(cudaMemsetAsync(d, 1, 16, s2));
  CHECK(cudaEventRecord(b, s1));
  CHECK(cudaEventSynchronize(b));
  if (cudaEventQuery(b) != cudaSuccess) return 5;
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  std::printf("spin 2 ms measured %.3f ms\n", ms);
  if (ms < 1.5f || ms > 20.f) return 6;
  CHECK(cudaStreamSynchronize(s2));
  unsigned char bytes[16];
  CHECK(cudaMemcpyAsync(bytes, d, 16, cudaMemcpyDeviceToHost, s2));
  CHECK(cudaStreamSynchronize(s2));
  if (bytes[0] != 1 || bytes[15] != 1) return 7;

  // Capture into a graph and replay it.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
  scale<<<4, 256, 0, s2>>>(d, 3.f, n);
  CHECK(cudaMemsetAsync(d2, 7, 8, s2));
  spin_kernel<<<1, 1, 0, s2>>>(1000000);
  CHECK(cudaStreamEndCapture(s2, &graph));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  std::printf("captured %zu nodes\n", nodes);
  if (nodes != 3) return 8;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaMemset(d2, 0, 8));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, s2));
  CHECK(cudaStreamSynchronize(s2));
  CHECK(cudaMemcpy(bytes, d2, 8, cudaMemcpyDeviceToHost));
  if (bytes[0] != 7 || bytes[7] != 7) return 9;
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));

  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  if (cudaFree(reinterpret_cast<void*>(0x1234)) == cudaSuccess) return 10;
  std::printf("rt_basic OK\n");
  return 0;
}
