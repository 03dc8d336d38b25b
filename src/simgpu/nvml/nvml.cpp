// The simulated GPUs' NVML (build/simgpu/libnvidia-ml.so.1): the device queries NCCL 2.28-2.30
// makes at initialisation (count, handles by index and PCI bus id, compute capability, PCI
// identity and link, P2P status), and the memory queries of nvidia-smi, pynvml and vLLM
// (memory info v1 and v2, UUID, handle by UUID, running compute processes).
// It answers as a PCIe machine: peer reads and writes work, NVLink, fabric and platform
// queries are NOT_SUPPORTED. No NVIDIA header is needed: the ABI is a C enum of return
// codes, opaque device handles and a few plain structures, declared here as NVML's API
// reference (nvml.h of the NVIDIA GPU Deployment Kit; the same layouts as nvidia-ml-py's
// ctypes structures) defines them. Memory figures agree with the simulated libcuda: the
// total is SIMGPU_MEM_BYTES, the use what the processes on the GPU allocated through it
// (each publishes its own in a shared table, ../process_memory.h). Device count comes from SIMGPU_DEVICES, as in libcuda;
// like the real NVML it ignores CUDA_VISIBLE_DEVICES.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../process_memory.h"

#define NVML_API extern "C" __attribute__((visibility("default")))

namespace {

enum Return : int {
  kSuccess = 0,
  kUninitialized = 1,
  kInvalidArgument = 2,
  kNotSupported = 3,
  kNotFound = 6,
  kInsufficientSize = 7,
  kArgumentVersionMismatch = 25,
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
    case kInsufficientSize: return "Insufficient Size";
    case kArgumentVersionMismatch: return "Argument Version Mismatch";
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

// An H100 SXM5 80GB (vendor 0x10de, device 0x2330, subsystem 0x16c1) at libcuda's bus id, on a
// PCIe 5.0 x16 link. The structures are NVML's nvmlPciInfo_t and nvmlPciInfoExt_v1_t.
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct PciInfoExt {
  unsigned version, domain, bus, device, pci_device_id, pci_subsystem_id, base_class, sub_class;
  char bus_id[32];
};
constexpr unsigned kPciDeviceId = 0x2330u << 16 | 0x10de, kPciSubsystemId = 0x16c1u << 16 | 0x10de;

NVML_API int nvmlDeviceGetPciInfo_v3(void* device, PciInfo* pci) {
  Device* d = as_device(device);
  if (!d || !pci) return kInvalidArgument;
  std::memset(pci, 0, sizeof *pci);
  pci->bus = d->index + 1;
  pci->pci_device_id = kPciDeviceId;
  pci->pci_subsystem_id = kPciSubsystemId;
  std::snprintf(pci->bus_id_legacy, sizeof pci->bus_id_legacy, "0000:%02x:00.0", pci->bus);
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02x:00.0", pci->bus);
  return kSuccess;
}
NVML_API int nvmlDeviceGetPciInfo_v2(void* device, PciInfo* pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }
NVML_API int nvmlDeviceGetPciInfo(void* device, PciInfo* pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }

NVML_API int nvmlDeviceGetPciInfoExt(void* device, PciInfoExt* pci) {
  Device* d = as_device(device);
  if (!d || !pci) return kInvalidArgument;
  unsigned version = pci->version;
  std::memset(pci, 0, sizeof *pci);
  pci->version = version;
  pci->bus = d->index + 1;
  pci->pci_device_id = kPciDeviceId;
  pci->pci_subsystem_id = kPciSubsystemId;
  pci->base_class = 0x03;  // display controller
  pci->sub_class = 0x02;   // 3D controller
  std::snprintf(pci->bus_id, sizeof pci->bus_id, "00000000:%02x:00.0", pci->bus);
  return kSuccess;
}

NVML_API int nvmlDeviceGetPcieLinkMaxSpeed(void* device, unsigned* mbps) {
  if (!as_device(device) || !mbps) return kInvalidArgument;
  *mbps = 32000;  // 32 GT/s per lane
  return kSuccess;
}
NVML_API int nvmlDeviceGetCurrPcieLinkGeneration(void* device, unsigned* gen) {
  if (!as_device(device) || !gen) return kInvalidArgument;
  *gen = 5;
  return kSuccess;
}
NVML_API int nvmlDeviceGetCurrPcieLinkWidth(void* device, unsigned* width) {
  if (!as_device(device) || !width) return kInvalidArgument;
  *width = 16;
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

// ---- memory and processes ----

namespace {

// nvmlMemory_t, nvmlMemory_v2_t and nvmlProcessInfo_v2_t (which the _v3 process query fills).
struct Memory {
  unsigned long long total, free, used;
};
struct MemoryV2 {
  unsigned version;
  unsigned long long total, reserved, free, used;
};
// NVML_STRUCT_VERSION(Memory, 2): the structure's size, version 2 in the top byte.
constexpr unsigned kMemoryV2Version = static_cast<unsigned>(sizeof(MemoryV2)) | 2u << 24;
static_assert(kMemoryV2Version == 0x02000028u);
struct ProcessInfo {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
};
constexpr unsigned kNoInstance = 0xFFFFFFFFu;  // NVML_VALUE_NOT_AVAILABLE: not a MIG instance

unsigned long long device_memory_bytes() {
  const char* v = std::getenv("SIMGPU_MEM_BYTES");
  unsigned long long n = v && *v ? std::strtoull(v, nullptr, 10) : 0;
  return n ? n : 80ull << 30;  // libcuda's default
}

bool alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// Each live process's bytes on the device, from the table libcuda writes (nothing when no
// process has allocated yet). Mapped anew at each call: NVML queries are rare.
template <typename Visit>
void for_each_process(const Device& d, Visit&& visit) {
  std::string name = simgpu::process_memory_table_name(std::getenv("SIMGPU_SHM"), static_cast<int>(d.index));
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return;
  void* p = mmap(nullptr, sizeof(simgpu::ProcessMemoryTable), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return;
  const auto* table = static_cast<const simgpu::ProcessMemoryTable*>(p);
  if (table->magic.load() == simgpu::kProcessMemoryMagic) {
    for (const simgpu::ProcessMemoryRow& row : table->rows) {
      // The row's owner is named by a process id (unique across PID namespaces); NVML names
      // processes by pid.
      int pid = row.os_pid.load();
      uint64_t bytes = row.bytes.load();
      if (row.pid.load() && bytes && alive(pid)) visit(static_cast<unsigned>(pid), bytes);
    }
  }
  munmap(p, sizeof(simgpu::ProcessMemoryTable));
}

unsigned long long used_bytes(const Device& d) {
  unsigned long long used = 0;
  for_each_process(d, [&](unsigned, uint64_t bytes) { used += bytes; });
  return used;
}

// "GPU-" and the 16 bytes of libcuda's cuDeviceGetUuid ("simgpu-uuid-", zeros, the ordinal).
void format_uuid(const Device& d, char* out, size_t length) {
  unsigned char b[16] = {};
  std::memcpy(b, "simgpu-uuid-", 12);
  b[15] = static_cast<unsigned char>(d.index);
  std::snprintf(out, length, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}
constexpr unsigned kUuidLength = 41;  // "GPU-" + 36 + NUL (NVML_DEVICE_UUID_BUFFER_SIZE is 80)

Memory memory_of(const Device& d) {
  unsigned long long total = device_memory_bytes(), used = used_bytes(d);
  if (used > total) used = total;
  return Memory{total, total - used, used};
}

}  // namespace

// Both versions compute with memory_of, never by calling each other: an interposer (tandem)
// exports these names, and a call between them would reach it.
NVML_API int nvmlDeviceGetMemoryInfo(void* device, Memory* memory) {
  Device* d = as_device(device);
  if (!d || !memory) return kInvalidArgument;
  *memory = memory_of(*d);
  return kSuccess;
}

// Nothing is reserved by a simulated driver: reserved is 0, used + free = total.
NVML_API int nvmlDeviceGetMemoryInfo_v2(void* device, MemoryV2* memory) {
  Device* d = as_device(device);
  if (!d || !memory) return kInvalidArgument;
  if (memory->version != kMemoryV2Version) return kArgumentVersionMismatch;
  Memory m = memory_of(*d);
  memory->total = m.total;
  memory->reserved = 0;
  memory->free = m.free;
  memory->used = m.used;
  return kSuccess;
}

NVML_API int nvmlDeviceGetUUID(void* device, char* uuid, unsigned length) {
  Device* d = as_device(device);
  if (!d || !uuid) return kInvalidArgument;
  if (length < kUuidLength) return kInsufficientSize;
  format_uuid(*d, uuid, length);
  return kSuccess;
}

NVML_API int nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (!uuid || !device) return kInvalidArgument;
  for (int i = 0; i < device_count(); ++i) {
    char text[kUuidLength];
    format_uuid(g_devices[i], text, sizeof text);
    if (std::strcmp(text, uuid) == 0) {
      *device = &g_devices[i];
      return kSuccess;
    }
  }
  return kNotFound;
}

// The processes that allocated device memory on the GPU through the simulated libcuda. As
// NVML: with too small an array (or none), *count becomes the number needed and the answer
// is INSUFFICIENT_SIZE; with no process, SUCCESS and *count = 0.
NVML_API int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned* count, ProcessInfo* infos) {
  Device* d = as_device(device);
  if (!d || !count) return kInvalidArgument;
  unsigned capacity = infos ? *count : 0, n = 0;
  for_each_process(*d, [&](unsigned pid, uint64_t bytes) {
    if (n < capacity) infos[n] = ProcessInfo{pid, bytes, kNoInstance, kNoInstance};
    ++n;
  });
  *count = n;
  return n > capacity ? kInsufficientSize : kSuccess;
}

// What PyTorch's driver wrapper (c10/cuda/driver_api) resolves when NVML is present: every
// name must exist, or torch.cuda initialisation fails. A PCIe machine has no NVLink peers.
NVML_API int nvmlDeviceGetNvLinkRemoteDeviceType(void*, unsigned, int*) { return kNotSupported; }

// The older process list: {pid, usedGpuMemory} per process (NVML's nvmlProcessInfo_v1_t).
struct ProcessInfoV1 {
  unsigned pid;
  unsigned long long used_gpu_memory;
};
static_assert(sizeof(ProcessInfoV1) == 16, "nvmlProcessInfo_v1_t");
NVML_API int nvmlDeviceGetComputeRunningProcesses(void* device, unsigned* count, ProcessInfoV1* infos) {
  Device* d = as_device(device);
  if (!d || !count) return kInvalidArgument;
  unsigned capacity = infos ? *count : 0, n = 0;
  for_each_process(*d, [&](unsigned pid, uint64_t bytes) {
    if (n < capacity) infos[n] = ProcessInfoV1{pid, bytes};
    ++n;
  });
  *count = n;
  return n > capacity ? kInsufficientSize : kSuccess;
}

// The CUDA version the driver supports, as cuDriverGetVersion reports it (e.g. 13000).
NVML_API int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (!version) return kInvalidArgument;
  *version = CUDA_VERSION;  // the toolkit the simulated driver is built with, as its cuDriverGetVersion
  return kSuccess;
}
NVML_API int nvmlSystemGetCudaDriverVersion(int* version) { return nvmlSystemGetCudaDriverVersion_v2(version); }

// ---- topology: which CPUs and NUMA nodes are near a GPU (vLLM binds its workers with it) ----
// The simulated machine has one NUMA node, 0, holding every CPU it has configured: each GPU is
// near all of them. Sets are bitmaps in unsigned longs, CPU or node i at bit i % 64 of word
// i / 64 (nvml.h); the answer is cut to the words given, as NVML does.
namespace {
void fill_cpu_set(unsigned words, unsigned long* set) {
  long cpus = sysconf(_SC_NPROCESSORS_CONF);
  constexpr unsigned kBits = 8 * sizeof(unsigned long);
  for (unsigned w = 0; w < words; ++w) {
    set[w] = 0;
    for (unsigned b = 0; b < kBits; ++b)
      if (long(w * kBits + b) < cpus) set[w] |= 1ul << b;
  }
}
}  // namespace

NVML_API int nvmlDeviceGetNumaNodeId(void* device, unsigned* node) {
  if (!as_device(device) || !node) return kInvalidArgument;
  *node = 0;
  return kSuccess;
}

// scope: 0 the NUMA node, 1 the socket (NVML_AFFINITY_SCOPE_NODE / _SOCKET): the same here.
NVML_API int nvmlDeviceGetCpuAffinityWithinScope(void* device, unsigned words, unsigned long* set, unsigned scope) {
  if (!as_device(device) || !set || words == 0 || scope > 1) return kInvalidArgument;
  fill_cpu_set(words, set);
  return kSuccess;
}

NVML_API int nvmlDeviceGetCpuAffinity(void* device, unsigned words, unsigned long* set) {
  if (!as_device(device) || !set || words == 0) return kInvalidArgument;
  fill_cpu_set(words, set);
  return kSuccess;
}

NVML_API int nvmlDeviceGetMemoryAffinity(void* device, unsigned words, unsigned long* set, unsigned scope) {
  if (!as_device(device) || !set || words == 0 || scope > 1) return kInvalidArgument;
  for (unsigned w = 0; w < words; ++w) set[w] = 0;
  set[0] = 1;  // node 0
  return kSuccess;
}
