// Checks of what NCCL needs from the simulated driver and NVML, one behaviour each, without
// NCCL itself (simgpu_nccl runs NCCL).
// Usage: simgpu_nccl_driver FATBIN CHECK
//   limits    H100 shared-memory attributes; a launch over its function's dynamic shared memory
//             fails until cuFuncSetAttribute opts in; no multicast
//   launch_event  cuLaunchKernelEx's launch-completion event completes when the kernel starts
//   capture   what NCCL does inside a capture: dependency updates, a joined stream destroyed
//             before the capture ends, event-record nodes, user objects released with the
//             last (executable) graph holding them
//   memops    cuStreamWaitValue32/64 hold a stream until the host writes the word;
//             cuStreamWriteValue32/64 and cuStreamBatchMemOp store in stream order
//   mapped    cuMemMap'ed memory: cuMemRetainAllocationHandle, cuMemGetAddressRange, legacy
//             IPC capability (cuMemAlloc'ed: yes, mapped: no), the mapping outliving cuMemRelease
//   images    a cubin without kernels loads (nvcc embeds one in every program); text does not
//   nvml      libnvidia-ml.so.1: devices, handles by PCI bus id, PCI identity, P2P, no NVLink
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "check.h"

static void limits(const char* fatbin) {
  CUmodule mod;
  CUfunction f = load_kernel(fatbin, "spin_kernel", &mod);
  int v = 0;
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
  CHECK(v == 227 * 1024);
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 0));
  CHECK(v == 228 * 1024);
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0));
  CHECK(v == 0);
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
  CHECK(v == 48 * 1024);
  unsigned long long ns = 1000;
  void* params[] = {&ns};
  CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 64 << 10, nullptr, params, nullptr) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 228 << 10) == CUDA_ERROR_INVALID_VALUE);
  CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10));
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
  CHECK(v == 64 << 10);
  CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 64 << 10, nullptr, params, nullptr));
  CK(cuCtxSynchronize());
  size_t granularity = 0;
  CUmulticastObjectProp mc{};
  CHECK(cuMulticastGetGranularity(&granularity, &mc, CU_MULTICAST_GRANULARITY_MINIMUM) == CUDA_ERROR_NOT_SUPPORTED);
}

static void launch_event(const char* fatbin) {
  CUfunction spin = load_kernel(fatbin, "spin_kernel");
  CUstream s;
  CUevent started;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&started, CU_EVENT_DISABLE_TIMING));
  unsigned long long ns = 100000000;  // two kernels of 100 ms
  void* params[] = {&ns};
  CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr));
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
  attr.value.launchCompletionEvent.event = started;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = s;
  config.attrs = &attr;
  config.numAttrs = 1;
  auto t0 = std::chrono::steady_clock::now();
  CK(cuLaunchKernelEx(&config, spin, params, nullptr));
  CK(cuEventSynchronize(started));  // the second kernel has started: the first has run
  double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY);  // and it is still running
  std::printf("launch-completion event after %.0f ms\n", at * 1e3);
  CHECK(at >= 0.090);
  CK(cuStreamSynchronize(s));
}

static int g_destroyed = 0;
static void count_destruction(void*) { ++g_destroyed; }

static void capture(const char* fatbin) {
  CUfunction spin = load_kernel(fatbin, "spin_kernel");
  CUstream s, joined;
  CUevent fork_point, recorded;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&joined, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&fork_point, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&recorded, CU_EVENT_DISABLE_TIMING));
  CUgraphNode none = nullptr;
  CHECK(cuStreamUpdateCaptureDependencies(s, &none, nullptr, 0, CU_STREAM_SET_CAPTURE_DEPENDENCIES) == CUDA_ERROR_ILLEGAL_STATE);
  // A stream that joined the capture is destroyed before it ends (NCCL's strong streams do).
  unsigned long long ns = 100000000;
  void* params[] = {&ns};
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr));
  CK(cuEventRecord(fork_point, s));
  CK(cuStreamWaitEvent(joined, fork_point, 0));
  CK(cuStreamUpdateCaptureDependencies(joined, &none, nullptr, 0, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
  CK(cuStreamDestroy(joined));
  CUgraph g;
  CK(cuStreamEndCapture(s, &g));
  // An event-record node after the 100 ms kernel, and a user object the graph holds.
  CUgraphNode node;
  CK(cuGraphAddEventRecordNode(&node, g, nullptr, 0, recorded));
  CUgraphNodeType type;
  CK(cuGraphNodeGetType(node, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  CUuserObject object;
  CK(cuUserObjectCreate(&object, nullptr, count_destruction, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CK(cuGraphRetainUserObject(g, object, 1, CU_GRAPH_USER_OBJECT_MOVE));
  CUgraphExec exec;
  CK(cuGraphInstantiateWithFlags(&exec, g, 0));
  CK(cuGraphDestroy(g));
  CHECK(g_destroyed == 0);  // the executable graph still holds it
  CK(cuGraphLaunch(exec, s));
  CHECK(cuEventQuery(recorded) == CUDA_ERROR_NOT_READY);  // behind the kernel
  CK(cuStreamSynchronize(s));
  CHECK(cuEventQuery(recorded) == CUDA_SUCCESS);
  CK(cuGraphExecDestroy(exec));
  CHECK(g_destroyed == 1);
}

static void memops() {
  use_primary_context();
  CUdeviceptr words;
  CK(cuMemAlloc(&words, 64));
  CK(cuMemsetD8(words, 0, 64));
  auto* host = reinterpret_cast<volatile uint64_t*>(words);  // device memory is host memory here
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamWaitValue32(s, words, 5, CU_STREAM_WAIT_VALUE_GEQ));
  CK(cuStreamWriteValue32(s, words + 8, 7, 0));
  CK(cuStreamWaitValue64(s, words + 16, 1ull << 40, CU_STREAM_WAIT_VALUE_EQ));
  CUstreamBatchMemOpParams write{};
  write.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  write.writeValue.address = words + 24;
  write.writeValue.value64 = 9;
  CK(cuStreamBatchMemOp(s, 1, &write, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY && host[1] == 0);  // held at the first wait
  host[0] = 4;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY && host[1] == 0);  // 4 < 5
  host[0] = 6;
  for (int i = 0; i < 2000 && host[1] != 7; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(host[1] == 7 && host[3] == 0);  // past the first wait (within 2 s), held at the second
  host[2] = 1ull << 40;
  CK(cuStreamSynchronize(s));
  CHECK(host[3] == 9);
  CK(cuMemFree(words));
}

static void mapped() {
  use_primary_context();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  const size_t size = 4 << 20;
  CUdeviceptr va;
  CK(cuMemAddressReserve(&va, size, 0, 0, 0));
  CUmemGenericAllocationHandle h, again;
  CK(cuMemCreate(&h, size, &prop, 0));
  CK(cuMemMap(va, size, 0, h, 0));
  CUmemAccessDesc access{prop.location, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CK(cuMemSetAccess(va, size, &access, 1));
  CK(cuMemRelease(h));  // the mapping keeps the memory, as NCCL's allocator expects
  CK(cuMemsetD32(va, 0x1234, size / 4));
  CK(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + 4096)));
  CUdeviceptr base = 0;
  size_t bytes = 0;
  CK(cuMemGetAddressRange(&base, &bytes, va + 4096));
  CHECK(base == va && bytes == size);
  int legacy = -1;
  CK(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va));
  CHECK(legacy == 0);
  CUdeviceptr plain;
  CK(cuMemAlloc(&plain, 4096));
  CK(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, plain));
  CHECK(legacy == 1);
  CK(cuMemFree(plain));
  CK(cuMemUnmap(va, size));
  CHECK(cuMemGetAddressRange(&base, &bytes, va) == CUDA_ERROR_NOT_FOUND);
  CHECK(cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(va)) == CUDA_ERROR_INVALID_VALUE);
  CK(cuMemRelease(again));
  CK(cuMemAddressFree(va, size));
}

static void images() {
  use_primary_context();
  // The smallest cubin: an ELF header with no sections, so no kernels and no globals.
  Elf64_Ehdr empty{};
  std::memcpy(empty.e_ident, ELFMAG, SELFMAG);
  empty.e_ident[EI_CLASS] = ELFCLASS64;
  empty.e_ident[EI_DATA] = ELFDATA2LSB;
  empty.e_ehsize = sizeof empty;
  CUmodule m;
  CK(cuModuleLoadData(&m, &empty));
  CUfunction f;
  CHECK(cuModuleGetFunction(&f, m, "spin_kernel") == CUDA_ERROR_NOT_FOUND);
  CHECK(cuModuleLoadData(&m, "no entry, no global") == CUDA_ERROR_INVALID_IMAGE);
}

static void nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  CHECK(lib);
  auto sym = [&](const char* name) {
    void* p = dlsym(lib, name);
    if (!p) std::fprintf(stderr, "FAIL: NVML has no %s\n", name);
    CHECK(p);
    return p;
  };
  auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
  auto count = reinterpret_cast<int (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
  auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto index_of = reinterpret_cast<int (*)(void*, unsigned*)>(sym("nvmlDeviceGetIndex"));
  auto cc = reinterpret_cast<int (*)(void*, int*, int*)>(sym("nvmlDeviceGetCudaComputeCapability"));
  auto p2p = reinterpret_cast<int (*)(void*, void*, int, int*)>(sym("nvmlDeviceGetP2PStatus"));
  auto nvlink = reinterpret_cast<int (*)(void*, unsigned, int*)>(sym("nvmlDeviceGetNvLinkState"));
  auto pci = reinterpret_cast<int (*)(void*, unsigned*)>(sym("nvmlDeviceGetPciInfo_v3"));
  CHECK(init() == 0);
  unsigned n = 0;
  CHECK(count(&n) == 0 && n == 2);  // SIMGPU_DEVICES=2
  // The bus id libcuda gives device 1, in NVML's and in CUDA's spelling.
  char bus[32];
  CUdevice dev1;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev1, 1));
  CK(cuDeviceGetPCIBusId(bus, sizeof bus, dev1));
  void *a, *b, *again;
  unsigned index = 9;
  CHECK(by_bus(bus, &b) == 0 && index_of(b, &index) == 0 && index == 1);
  CHECK(by_bus(("0000" + std::string(bus)).c_str(), &again) == 0 && again == b);
  CHECK(by_bus("0000:09:00.0", &again) != 0);
  CHECK(by_index(0, &a) == 0 && a != b);
  int major = 0, minor = -1, status = -1, state = 0;
  CHECK(cc(a, &major, &minor) == 0 && major == 9 && minor == 0);
  CHECK(p2p(a, b, 0, &status) == 0 && status == 0);  // NVML_P2P_CAPS_INDEX_READ: OK
  CHECK(nvlink(a, 0, &state) == 3);                   // NVML_ERROR_NOT_SUPPORTED
  unsigned info[32] = {};                             // nvmlPciInfo_t: 16 bytes of legacy id, then domain, bus, ...
  CHECK(pci(b, info) == 0 && info[5] == 2 && info[7] == (0x2330u << 16 | 0x10de));
}

int main(int argc, char** argv) {
  CHECK(argc == 3);
  std::string check = argv[2];
  if (check == "limits") limits(argv[1]);
  else if (check == "memops") memops();
  else if (check == "launch_event") launch_event(argv[1]);
  else if (check == "capture") capture(argv[1]);
  else if (check == "mapped") mapped();
  else if (check == "images") images();
  else if (check == "nvml") nvml();
  else CHECK(!"unknown check");
  std::printf("simgpu %s: ok\n", check.c_str());
  return 0;
}
