// SIMGPU_* settings (one table, documented in docs/simgpu.md), logging and failure injection.
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <set>

#include "sim.h"

namespace simgpu {

namespace {

struct Row {
  const char* name;
  const char* def;
  const char* description;
};
// The table (also printed in docs/simgpu.md).
constexpr Row kSettings[] = {
    {"SIMGPU_DEVICES", "1", "number of simulated GPUs"},
    {"SIMGPU_SMS", "132", "SMs per GPU (kernels occupy min(grid blocks, SMs))"},
    {"SIMGPU_MEM_BYTES", "85899345920", "device memory per GPU (80 GiB); larger allocations fail"},
    {"SIMGPU_MEM_SHARED", "0", "1: SIMGPU_MEM_BYTES is one budget for all processes of a GPU, VMM memory included (as on a GPU); 0: per process, VMM not counted"},
    {"SIMGPU_NS_PER_WAVE", "2000", "cost of one wave of blocks of a non-spin kernel (ns)"},
    {"SIMGPU_MIN_KERNEL_NS", "2000", "floor of a non-spin kernel's cost (ns)"},
    {"SIMGPU_LINK_GBPS", "63", "a GPU's link to its peers, GB/s per direction (PCIe 5.0 x16): NCCL collectives' duration"},
    {"SIMGPU_SHARING", "timeslice", "timeslice (processes take turns, as without MPS) or mps"},
    {"SIMGPU_TIMESLICE_US", "2000", "time slice of a process when others wait (timeslice mode)"},
    {"SIMGPU_CONTEXT_SWITCH_US", "40", "GPU time lost when the GPU passes from one process to another (timeslice mode)"},
    {"SIMGPU_LAUNCH_LATENCY_US", "4", "a kernel starts no earlier than this after its launch on an idle stream"},
    {"SIMGPU_DEVICE_GBPS", "3350", "device memory bandwidth, GB/s (HBM3): memsets and device-to-device copies"},
    {"SIMGPU_PCIE_GBPS", "54", "host<->device copy bandwidth, GB/s (PCIe 5.0 x16 achieved)"},
    {"SIMGPU_EXIT_TEARDOWN_US", "0", "the driver's teardown at exit, registered by cuInit: event calls from its start on fail and are reported (0: none)"},
    {"SIMGPU_DETERMINISTIC", "0", "1: fixed costs, no jitter"},
    {"SIMGPU_FAIL", "", "failure injection: <api>:<nth>[,<api>:<nth>...]"},
    {"SIMGPU_LOG", "warn", "error|warn|info|debug"},
    {"SIMGPU_SHM", "", "name prefix of the shared-memory segments (default /simgpu-<uid>)"},
};

const char* value_of(const char* name) {
  const char* v = std::getenv(name);
  if (v && *v) return v;
  for (const Row& r : kSettings)
    if (std::strcmp(r.name, name) == 0) return r.def;
  return "";
}

uint64_t number(const char* name, uint64_t lo, uint64_t hi) {
  const char* v = value_of(name);
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (!end || *end || n < lo || n > hi) {
    std::fprintf(stderr, "[simgpu %d] warn: %s='%s' is not a number in [%llu, %llu]\n",
                 static_cast<int>(getpid()), name, v, static_cast<unsigned long long>(lo),
                 static_cast<unsigned long long>(hi));
    for (const Row& r : kSettings)
      if (std::strcmp(r.name, name) == 0) return std::strtoull(r.def, nullptr, 10);
  }
  return n;
}

Settings load() {
  Settings s;
  const char* log = value_of("SIMGPU_LOG");
  s.log = !std::strcmp(log, "error") ? 0 : !std::strcmp(log, "info") ? 2 : !std::strcmp(log, "debug") ? 3 : 1;
  s.devices = static_cast<int>(number("SIMGPU_DEVICES", 1, 16));
  s.sms = static_cast<int>(number("SIMGPU_SMS", 1, 1024));
  s.mem_bytes = number("SIMGPU_MEM_BYTES", 1 << 20, 1ull << 50);
  s.mem_shared = std::strcmp(value_of("SIMGPU_MEM_SHARED"), "1") == 0;
  s.ns_per_block_wave = number("SIMGPU_NS_PER_WAVE", 0, 1000000000);
  s.min_kernel_ns = number("SIMGPU_MIN_KERNEL_NS", 0, 1000000000);
  s.link_gbps = number("SIMGPU_LINK_GBPS", 1, 100000);
  s.mps = std::strcmp(value_of("SIMGPU_SHARING"), "mps") == 0;
  s.timeslice_ns = number("SIMGPU_TIMESLICE_US", 10, 10000000) * 1000;
  s.context_switch_ns = number("SIMGPU_CONTEXT_SWITCH_US", 0, 1000000) * 1000;
  s.launch_latency_ns = number("SIMGPU_LAUNCH_LATENCY_US", 0, 1000000) * 1000;
  s.device_gbps = number("SIMGPU_DEVICE_GBPS", 1, 1000000);
  s.pcie_gbps = number("SIMGPU_PCIE_GBPS", 1, 1000000);
  s.exit_teardown_ns = number("SIMGPU_EXIT_TEARDOWN_US", 0, 10000000) * 1000;
  s.deterministic = std::strcmp(value_of("SIMGPU_DETERMINISTIC"), "1") == 0;
  s.shm_prefix = value_of("SIMGPU_SHM");
  if (s.shm_prefix.empty()) s.shm_prefix = "/simgpu-" + std::to_string(getuid());
  s.fail_spec = value_of("SIMGPU_FAIL");
  // Logged here, with the level just read: log() itself needs settings().
  if (s.log >= 2)
    for (const Row& r : kSettings)
      if (const char* v = std::getenv(r.name); v && *v)
        std::fprintf(stderr, "[simgpu %d] info: %s=%s\n", static_cast<int>(getpid()), r.name, v);
  return s;
}

}  // namespace

// Read once, on first use (never in a constructor: nothing runs at load time).
const Settings& settings() {
  static const Settings s = load();
  return s;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void log(int level, const char* fmt, ...) {
  if (level > settings().log) return;
  static const char* names[] = {"error", "warn", "info", "debug"};
  char line[1024];
  int n = std::snprintf(line, sizeof line, "[simgpu %d] %s: ", static_cast<int>(getpid()), names[level]);
  va_list ap;
  va_start(ap, fmt);
  n += std::vsnprintf(line + n, sizeof line - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  if (n > static_cast<int>(sizeof line) - 2) n = sizeof line - 2;
  line[n++] = '\n';
  ssize_t ignored = ::write(2, line, static_cast<size_t>(n));
  (void)ignored;
}

}  // namespace simgpu

// Called by the weak stubs of known but unimplemented entry points (entry_points.c).
extern "C" int simgpu_not_supported(const char* symbol) {
  static simgpu::ProcessMutex m;
  static auto* seen = new std::set<std::string>;  // never destroyed: stubs may run at exit
  bool first;
  {
    std::lock_guard<std::mutex> lock(m);
    first = seen->insert(symbol).second;
  }
  if (first) simgpu::log(2, "%s is not supported by the simulated driver", symbol);
  return CUDA_ERROR_NOT_SUPPORTED;
}
