// Each process's device memory on a simulated GPU, in a shared-memory table per GPU
// (/simgpu-<uid>-mem-dev<N>, prefix SIMGPU_SHM): the simulated libcuda writes its own row
// (process_memory.cpp), the simulated NVML reads them all (nvmlDeviceGetMemoryInfo,
// nvmlDeviceGetComputeRunningProcesses). Both libraries are built from this one header.
#pragma once
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace simgpu {

constexpr uint32_t kProcessMemoryMagic = 0x534d454d;  // "SMEM"
constexpr int kProcessMemoryRows = 128;

struct ProcessMemoryRow {
  std::atomic<int32_t> pid;  // the process's id (process_identity.cpp), 0: free; a dead process's
                             // row is taken over by a new process
  std::atomic<int32_t> os_pid;  // its pid, as NVML reports running processes
  std::atomic<uint64_t> bytes;
};

struct ProcessMemoryTable {
  std::atomic<uint32_t> magic;
  uint32_t pad;
  ProcessMemoryRow rows[kProcessMemoryRows];
};

// SIMGPU_SHM (default /simgpu-<uid>) followed by -mem-dev<N>.
inline std::string process_memory_table_name(const char* prefix, int device) {
  std::string p = prefix && *prefix ? prefix : "/simgpu-" + std::to_string(getuid());
  return p + "-mem-dev" + std::to_string(device);
}

}  // namespace simgpu
