// The simulated GPUs' NVML (build/simgpu/libnvidia-ml.so.1): the device queries NCCL makes
// at initialisation (count, handles by index and PCI bus id, compute capability, P2P status).
// It answers as a PCIe machine: peer reads and writes work, NVLink, fabric and platform
// queries are NOT_SUPPORTED. No NVIDIA header is needed: the ABI is a C enum of return
// codes and opaque device handles. Device count comes from SIMGPU_DEVICES, as in libcuda;
// like the real NVML it ignores CUDA_VISIBLE_DEVICES.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NVML_API extern "C" __attribute__((visibility("default")))

namespace {

enum Return : int {
  kSuccess = 0,
  kUninitialized = 1,
  kInvalidArgument = 2,
  kNotSupported = 3,
  kNotFound = 6,
};
enum P2PCaps : int { kCapsRead = 0, kCapsWrite = 1, kCapsNvlink = 2, kCapsAtomics = 3, kCapsPci = 4 };
constexpr int kP2PStatusOk = 0;
constexpr int kP2PStatusNotSupported = 5;  // NVML_P2P_STATUS_NOT_SUPPORTED

struct Device {
  unsigned index;
};
constexpr int kMaxDevices = 16;
Device g_devices[kMaxDevices];

int device_count() {
  const char* v = std::getenv("SIMGPU_DEVICES");
  int n = v && *v ? std::atoi(v) : 1;
  return n < 1 ? 1 : n > kMaxDevices ? kMaxDevices : n;
}

Device* as_device(void* h) {
  auto* d = static_cast<Device*>(h);
  return d >= g_devices && d < g_devices + device_count() ? d : nullptr;
}

}  // namespace

NVML_API int nvmlInit_v2() {
  for (unsigned i = 0; i < kMaxDevices; ++i) g_devices[i].index = i;
  return kSuccess;
}
NVML_API int nvmlInit() { return nvmlInit_v2(); }
NVML_API int nvmlInitWithFlags(unsigned) { return nvmlInit_v2(); }
NVML_API int nvmlShutdown() { return kSuccess; }

NVML_API const char* nvmlErrorString(int r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    default: return "Unknown Error";
  }
}

NVML_API int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!count) return kInvalidArgument;
  *count = static_cast<unsigned>(device_count());
  return kSuccess;
}
NVML_API int nvmlDeviceGetCount(unsigned* count) { return nvmlDeviceGetCount_v2(count); }

NVML_API int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (!device || index >= static_cast<unsigned>(device_count())) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
NVML_API int nvmlDeviceGetHandleByIndex(unsigned index, void** device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

// Bus ids as libcuda gives them (cuDeviceGetPCIBusId): device N is bus N+1, any domain width.
NVML_API int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (!bus_id || !device || std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return kInvalidArgument;
  if (domain != 0 || dev != 0 || fn != 0 || bus < 1 || bus > static_cast<unsigned>(device_count())) return kNotFound;
  *device = &g_devices[bus - 1];
  return kSuccess;
}
NVML_API int nvmlDeviceGetHandleByPciBusId(const char* bus_id, void** device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

NVML_API int nvmlDeviceGetIndex(void* device, unsigned* index) {
  Device* d = as_device(device);
  if (!d || !index) return kInvalidArgument;
  *index = d->index;
  return kSuccess;
}

NVML_API int nvmlDeviceGetCudaComputeCapability(void* device, int* major, int* minor) {
  if (!as_device(device) || !major || !minor) return kInvalidArgument;
  *major = 9;
  *minor = 0;
  return kSuccess;
}

NVML_API int nvmlDeviceGetName(void* device, char* name, unsigned length) {
  Device* d = as_device(device);
  if (!d || !name || length == 0) return kInvalidArgument;
  std::snprintf(name, length, "tandem simulated GPU %u", d->index);
  return kSuccess;
}

// Peers read and write each other over PCIe; no NVLink, so no NVLink P2P and no atomics over it.
NVML_API int nvmlDeviceGetP2PStatus(void* a, void* b, int caps, int* status) {
  if (!as_device(a) || !as_device(b) || !status) return kInvalidArgument;
  *status = caps == kCapsRead || caps == kCapsWrite || caps == kCapsPci || caps == kCapsAtomics ? kP2PStatusOk
                                                                                               : kP2PStatusNotSupported;
  return kSuccess;
}

// No NVLink, no multi-node NVLink fabric, no platform (rack) information.
NVML_API int nvmlDeviceGetNvLinkState(void*, unsigned, int*) { return kNotSupported; }
NVML_API int nvmlDeviceGetNvLinkRemotePciInfo_v2(void*, unsigned, void*) { return kNotSupported; }
NVML_API int nvmlDeviceGetNvLinkRemotePciInfo(void*, unsigned, void*) { return kNotSupported; }
NVML_API int nvmlDeviceGetNvLinkCapability(void*, unsigned, int, unsigned*) { return kNotSupported; }
NVML_API int nvmlDeviceGetFieldValues(void*, int, void*) { return kNotSupported; }
NVML_API int nvmlDeviceGetGpuFabricInfoV(void*, void*) { return kNotSupported; }
NVML_API int nvmlDeviceGetPlatformInfo(void*, void*) { return kNotSupported; }
