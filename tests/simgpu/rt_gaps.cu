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

// A graph captured around cudaMallocAsync / cudaFreeAsync replays (it crashed in run_copy: the
// capture's free unmapped the memory the graph's copies use), and a graph whose memory the
// program freed is refused at launch instead of crashing.
static void check_graph_alloc() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t n = 1 << 16;
  std::vector<unsigned char> in(n), out(n);
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* d = nullptr;
  CHECK(cudaMallocAsync(&d, n, s));
  CHECK(cudaMemcpyAsync(d, in.data(), n, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemsetAsync(d, 0x5a, 16, s));
  CHECK(cudaMemcpyAsync(out.data(), d, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaFreeAsync(d, s));
  CHECK(cudaStreamEndCapture(s, &g));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
  EXPECT(nodes == 5);  // alloc, copy, memset, copy, free
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int round = 1; round <= 2; ++round) {
    std::memset(in.data(), round, n);
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(out[0] == 0x5a && out[15] == 0x5a && out[16] == round && out[n - 1] == round);
  }
  // Destroyed while its launch may still run (allowed): the launch completes, then the memory goes.
  std::memset(in.data(), 3, n);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(out[16] == 3 && out[n - 1] == 3);

  // A free of memory not allocated by the graph cannot be captured (cuda.h).
  void* plain = nullptr;
  CHECK(cudaMalloc(&plain, n));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT(cudaFreeAsync(plain, s) != cudaSuccess);
  cudaStreamEndCapture(s, &g);
  cudaGetLastError();
  if (g) cudaGraphDestroy(g);

  // Captured copies into memory the program then frees: the launch fails, nothing crashes.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(plain, in.data(), n, cudaMemcpyHostToDevice, s));
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  CHECK(cudaFree(plain));
  EXPECT(cudaGraphLaunch(exec, s) != cudaSuccess);
  std::printf("graph_alloc: replayed twice, freed memory refused\n");
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

static void set_byte(void* p) { *static_cast<unsigned char*>(p) = 0xcd; }

static void check_graph_nodes() {
  const size_t w = 64, h = 4, n = 4096;
  unsigned char* d = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, w, h));
  std::vector<unsigned char> host(pitch * h, 0), back(n, 0);
  unsigned char flag = 0;
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t zero, set, copy, hostn, alloc, fill, out, freen;
  CHECK(cudaGraphAddMemcpyNode1D(&zero, g, nullptr, 0, d, host.data(), pitch * h, cudaMemcpyHostToDevice));
  cudaMemsetParams ms{};
  ms.dst = d, ms.pitch = pitch, ms.value = 0x11, ms.elementSize = 1, ms.width = w / 2, ms.height = h;
  CHECK(cudaGraphAddMemsetNode(&set, g, &zero, 1, &ms));
  cudaMemcpy3DParms cp{};
  cp.srcPtr = make_cudaPitchedPtr(d, pitch, w, h);
  cp.dstPtr = make_cudaPitchedPtr(back.data(), w, w, h);
  cp.extent = make_cudaExtent(w, h, 1);
  cp.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaGraphAddMemcpyNode(&copy, g, &set, 1, &cp));
  cudaHostNodeParams hp{set_byte, &flag};
  CHECK(cudaGraphAddHostNode(&hostn, g, &copy, 1, &hp));
  // Graph memory: allocated by the graph, filled, copied out, freed by the graph.
  cudaMemAllocNodeParams ap{};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = n;
  CHECK(cudaGraphAddMemAllocNode(&alloc, g, &hostn, 1, &ap));
  EXPECT(ap.dptr != nullptr);
  cudaMemsetParams fs{};
  fs.dst = ap.dptr, fs.value = 0x22222222, fs.elementSize = 4, fs.width = n / 4, fs.height = 1;
  CHECK(cudaGraphAddMemsetNode(&fill, g, &alloc, 1, &fs));
  std::vector<unsigned char> pool_back(n, 0);
  CHECK(cudaGraphAddMemcpyNode1D(&out, g, &fill, 1, pool_back.data(), ap.dptr, n, cudaMemcpyDeviceToHost));
  CHECK(cudaGraphAddMemFreeNode(&freen, g, &out, 1, ap.dptr));
  // Conditional nodes: the handle's default value picks the body (kernels do not set it here).
  std::vector<unsigned char> cond_back(8, 0);
  unsigned char* c = nullptr;
  CHECK(cudaMalloc(&c, 8));
  CHECK(cudaMemset(c, 0, 8));
  cudaGraphConditionalHandle on, off;
  CHECK(cudaGraphConditionalHandleCreate(&on, g, 1, cudaGraphCondAssignDefault));
  CHECK(cudaGraphConditionalHandleCreate(&off, g, 0, cudaGraphCondAssignDefault));
  cudaGraphNode_t if_on, if_off;
  cudaGraphNodeParams cparams{};
  cparams.type = cudaGraphNodeTypeConditional;
  cparams.conditional.handle = on;
  cparams.conditional.type = cudaGraphCondTypeIf;
  cparams.conditional.size = 1;
  CHECK(cudaGraphAddNode(&if_on, g, &freen, nullptr, 1, &cparams));
  cudaGraph_t body_on = cparams.conditional.phGraph_out[0];
  cudaGraphNode_t b;
  cudaMemsetParams bs{};
  bs.dst = c, bs.value = 0x33, bs.elementSize = 1, bs.width = 4, bs.height = 1;
  CHECK(cudaGraphAddMemsetNode(&b, body_on, nullptr, 0, &bs));
  cparams.conditional.handle = off;
  CHECK(cudaGraphAddNode(&if_off, g, &if_on, nullptr, 1, &cparams));
  bs.dst = c + 4, bs.value = 0x44;
  CHECK(cudaGraphAddMemsetNode(&b, cparams.conditional.phGraph_out[0], nullptr, 0, &bs));
  cudaGraphNode_t last;
  CHECK(cudaGraphAddMemcpyNode1D(&last, g, &if_off, 1, cond_back.data(), c, 8, cudaMemcpyDeviceToHost));

  // The clone runs the same bytes; the original still exists beside it.
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, g));
  cudaGraphNode_t set_in_clone;
  CHECK(cudaGraphNodeFindInClone(&set_in_clone, set, clone));
  cudaMemsetParams read{};
  CHECK(cudaGraphMemsetNodeGetParams(set_in_clone, &read));
  EXPECT(read.value == 0x11 && read.width == w / 2);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, clone, 0));
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaStreamSynchronize(0));
  for (size_t y = 0; y < h; ++y)
    EXPECT(back[y * w] == 0x11 && back[y * w + w / 2 - 1] == 0x11 && back[y * w + w / 2] == 0);
  EXPECT(flag == 0xcd);
  EXPECT(pool_back[0] == 0x22 && pool_back[n - 1] == 0x22);
  EXPECT(cond_back[0] == 0x33 && cond_back[3] == 0x33 && cond_back[4] == 0);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(clone));
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  std::fill(pool_back.begin(), pool_back.end(), 0);
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaStreamSynchronize(0));
  EXPECT(pool_back[n - 1] == 0x22);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  std::printf("graph_nodes: memcpy, memset, host, memory, conditional nodes and a clone ran\n");
}

static void check_arrays() {
  const size_t w = 32, h = 8;
  cudaChannelFormatDesc fmt = cudaCreateChannelDesc<float>();
  cudaArray_t a;
  CHECK(cudaMallocArray(&a, &fmt, w, h));
  cudaChannelFormatDesc got{};
  cudaExtent ext{};
  unsigned flags = 0;
  CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
  EXPECT(got.x == 32 && got.f == cudaChannelFormatKindFloat && ext.width == w && ext.height == h);
  std::vector<float> src(w * h), dst(w * h, 0.f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i);
  CHECK(cudaMemcpy2DToArray(a, 0, 0, src.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2DFromArray(dst.data(), w * sizeof(float), a, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(src.data(), dst.data(), src.size() * sizeof(float)) == 0);
  // Through device memory, and at an offset of (column 4, row 2).
  float* d = nullptr;
  CHECK(cudaMalloc(&d, w * h * sizeof(float)));
  CHECK(cudaMemcpy2DFromArray(d, w * sizeof(float), a, 4 * sizeof(float), 2, 8 * sizeof(float), 3,
                              cudaMemcpyDeviceToDevice));
  std::vector<float> part(w * h, -1.f);
  CHECK(cudaMemcpy(part.data(), d, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(part[0] == src[2 * w + 4] && part[w + 7] == src[3 * w + 11]);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  float seven[4] = {7, 7, 7, 7};
  CHECK(cudaMemcpyToArray(a, 0, 1, seven, sizeof seven, cudaMemcpyHostToDevice));
#pragma GCC diagnostic pop
  CHECK(cudaMemcpy2DFromArray(dst.data(), w * sizeof(float), a, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  EXPECT(dst[w] == 7.f && dst[w + 3] == 7.f && dst[w + 4] == src[w + 4]);
  // Out of the array: refused.
  EXPECT(cudaMemcpy2DToArray(a, 0, h, src.data(), w * sizeof(float), w * sizeof(float), 1, cudaMemcpyHostToDevice) !=
         cudaSuccess);
  cudaGetLastError();
  CHECK(cudaFreeArray(a));
  // A 3D array through cudaMemcpy3D.
  cudaArray_t a3;
  CHECK(cudaMalloc3DArray(&a3, &fmt, make_cudaExtent(4, 3, 2)));
  std::vector<float> s3(24), d3(24, 0.f);
  for (int i = 0; i < 24; ++i) s3[i] = float(100 + i);
  cudaMemcpy3DParms p{};
  p.srcPtr = make_cudaPitchedPtr(s3.data(), 4 * sizeof(float), 4, 3);
  p.dstArray = a3;
  p.extent = make_cudaExtent(4, 3, 2);
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&p));
  cudaMemcpy3DParms q{};
  q.srcArray = a3;
  q.dstPtr = make_cudaPitchedPtr(d3.data(), 4 * sizeof(float), 4, 3);
  q.extent = make_cudaExtent(4, 3, 2);
  q.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&q));
  EXPECT(std::memcmp(s3.data(), d3.data(), sizeof(float) * 24) == 0);
  CHECK(cudaFreeArray(a3));
  std::printf("arrays: 2D, offset, legacy and 3D copies moved the bytes\n");
}

// Legacy IPC: another process opens the handle, reads the parent's bytes and writes its own.
static void check_ipc() {
  const size_t n = 1 << 20;
  unsigned char* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMemset(d, 0xab, n));
  cudaIpcMemHandle_t h;
  CHECK(cudaIpcGetMemHandle(&h, d));
  void* self = nullptr;
  EXPECT(cudaIpcOpenMemHandle(&self, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess);  // not in its own process
  cudaGetLastError();
  cudaEvent_t e;
  CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t eh;
  CHECK(cudaIpcGetEventHandle(&eh, e));
  cudaEvent_t timed;
  CHECK(cudaEventCreate(&timed));
  EXPECT(cudaIpcGetEventHandle(&eh, timed) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaIpcGetEventHandle(&eh, e));
  EXPECT(run_child({"ipc_child", to_hex(&h, sizeof h), to_hex(&eh, sizeof eh)}) == 0);
  unsigned char back[2];
  CHECK(cudaMemcpy(back, d + n - 2, 2, cudaMemcpyDeviceToHost));
  EXPECT(back[0] == 0xcd && back[1] == 0xcd);
  CHECK(cudaMemcpy(back, d, 1, cudaMemcpyDeviceToHost));
  EXPECT(back[0] == 0xab);
  CHECK(cudaFree(d));
  std::printf("ipc: another process read and wrote the allocation\n");
}
static int ipc_child(const char* mem, const char* event) {
  cudaIpcMemHandle_t h;
  from_hex(mem, &h, sizeof h);
  unsigned char* p = nullptr;
  CHECK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&p), h, cudaIpcMemLazyEnablePeerAccess));
  unsigned char first = 0;
  CHECK(cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost));
  EXPECT(first == 0xab);
  CHECK(cudaMemset(p + (1 << 20) - 2, 0xcd, 2));
  cudaIpcEventHandle_t eh;
  from_hex(event, &eh, sizeof eh);
  cudaEvent_t e;
  CHECK(cudaIpcOpenEventHandle(&e, eh));
  CHECK(cudaEventSynchronize(e));
  CHECK(cudaIpcCloseMemHandle(p));
  return 0;
}

// An exportable pool: access set and read back, the pool and a pointer imported by another process.
static void check_pool() {
  cudaMemPool_t def;
  CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
  cudaMemAccessDesc self{};
  self.location.type = cudaMemLocationTypeDevice;
  self.location.id = 0;
  self.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(cudaMemPoolSetAccess(def, &self, 1));
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices > 1) {
    cudaMemLocation peer{cudaMemLocationTypeDevice, 1};
    cudaMemAccessFlags f;
    CHECK(cudaMemPoolGetAccess(&f, def, &peer));
    EXPECT(f == cudaMemAccessFlagsProtNone);
    cudaMemAccessDesc to_peer{peer, cudaMemAccessFlagsProtReadWrite};
    CHECK(cudaMemPoolSetAccess(def, &to_peer, 1));
    CHECK(cudaMemPoolGetAccess(&f, def, &peer));
    EXPECT(f == cudaMemAccessFlagsProtReadWrite);
  }
  int fd = -1;
  EXPECT(cudaMemPoolExportToShareableHandle(&fd, def, cudaMemHandleTypePosixFileDescriptor, 0) != cudaSuccess);
  cudaGetLastError();
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  unsigned char* d = nullptr;
  const size_t n = 8192;
  CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&d), n, pool, s));
  CHECK(cudaMemsetAsync(d, 0x61, n, s));
  CHECK(cudaStreamSynchronize(s));
  cudaMemPoolPtrExportData data;
  CHECK(cudaMemPoolExportPointer(&data, d));
  int inherited = fcntl(fd, F_DUPFD, 100);  // without close-on-exec: the child's copy of the fd
  EXPECT(run_child({"pool_child", std::to_string(inherited), to_hex(&data, sizeof data)}) == 0);
  unsigned char back = 0;
  CHECK(cudaMemcpy(&back, d + n - 1, 1, cudaMemcpyDeviceToHost));
  EXPECT(back == 0x62);
  CHECK(cudaFreeAsync(d, s));
  CHECK(cudaStreamSynchronize(s));
  std::printf("pool: access read back, pool and pointer imported by another process\n");
}
static int pool_child(const char* fd, const char* export_data) {
  cudaMemPool_t pool;
  CHECK(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(std::strtol(fd, nullptr, 10)),
                                             cudaMemHandleTypePosixFileDescriptor, 0));
  cudaMemPoolPtrExportData data;
  from_hex(export_data, &data, sizeof data);
  unsigned char* p = nullptr;
  CHECK(cudaMemPoolImportPointer(reinterpret_cast<void**>(&p), pool, &data));
  unsigned char first = 0;
  CHECK(cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost));
  EXPECT(first == 0x61);
  CHECK(cudaMemset(p + 8191, 0x62, 1));
  CHECK(cudaFree(p));
  return 0;
}

// The JIT linker: PTX and a cubin linked, the image loaded, its kernels found.
static void check_link(const char* ptx, const char* cubin) {
  CU(cuInit(0));
  CHECK(cudaFree(nullptr));  // the primary context, current
  char info[256] = "x";
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {info, reinterpret_cast<void*>(sizeof info)};
  CUlinkState link;
  CU(cuLinkCreate(2, opts, vals, &link));
  EXPECT(info[0] == '\0');
  CU(cuLinkAddFile(link, CU_JIT_INPUT_PTX, ptx, 0, nullptr, nullptr));
  FILE* f = std::fopen(cubin, "rb");
  EXPECT(f);
  std::vector<char> bytes(1 << 20);
  size_t size = std::fread(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  CU(cuLinkAddData(link, CU_JIT_INPUT_CUBIN, bytes.data(), size, "kernels.cubin", 0, nullptr, nullptr));
  char not_ptx[] = "this is not PTX";
  EXPECT(cuLinkAddData(link, CU_JIT_INPUT_PTX, not_ptx, sizeof not_ptx, "bad", 0, nullptr, nullptr) == CUDA_ERROR_INVALID_PTX);
  EXPECT(cuLinkAddFile(link, CU_JIT_INPUT_PTX, "/nonexistent.ptx", 0, nullptr, nullptr) == CUDA_ERROR_FILE_NOT_FOUND);
  void* image = nullptr;
  size_t image_size = 0;
  CU(cuLinkComplete(link, &image, &image_size));
  EXPECT(image && image_size > size);
  CUmodule m;
  CU(cuModuleLoadData(&m, image));
  CU(cuLinkDestroy(link));  // the module keeps what it needs
  CUfunction fn;
  CU(cuModuleGetFunction(&fn, m, "spin_kernel"));
  CU(cuModuleGetFunction(&fn, m, "touch_globals"));
  EXPECT(cuModuleGetFunction(&fn, m, "no_such_kernel") == CUDA_ERROR_NOT_FOUND);
  CUdeviceptr counter;
  size_t counter_size = 0;
  CU(cuModuleGetGlobal(&counter, &counter_size, m, "sim_counter"));
  EXPECT(counter_size == 4);
  CUlinkState empty;
  CU(cuLinkCreate(0, nullptr, nullptr, &empty));
  EXPECT(cuLinkComplete(empty, &image, &image_size) == CUDA_ERROR_INVALID_VALUE);
  CU(cuLinkDestroy(empty));
  std::printf("link: PTX and cubin linked, kernels and globals found\n");
}

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc < 2) return 2;
  std::string check = argv[1];
  if (check == "ipc_child" && argc == 4) return ipc_child(argv[2], argv[3]);
  if (check == "pool_child" && argc == 4) return pool_child(argv[2], argv[3]);
  if (check == "graph_alloc") check_graph_alloc();
  else if (check == "profiler") check_profiler();
  else if (check == "attach") check_attach();
  else if (check == "graph_nodes") check_graph_nodes();
  else if (check == "arrays") check_arrays();
  else if (check == "ipc") check_ipc();
  else if (check == "pool") check_pool();
  else if (check == "link" && argc == 4) check_link(argv[2], argv[3]);
  else return 2;
  return 0;
}
