// The timing of what the GPU does besides kernels (docs/simgpu.md "Timing"): memsets and
// copies take the time their bytes need at the device's or the PCIe link's bandwidth, and a
// kernel launched on an idle stream starts after the launch latency. The bytes themselves are
// real (device memory is host memory): the CPU's own work happens inside the modelled time,
// which only becomes longer when that work is slower than the model.
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "sim.h"

namespace simgpu {

namespace {

// GB/s are bytes per ns.
uint64_t transfer_ns(size_t bytes, uint64_t gbps) { return static_cast<uint64_t>(bytes) / std::max<uint64_t>(gbps, 1); }

bool is_device_memory(const void* p) { return valid_device_range(reinterpret_cast<CUdeviceptr>(p), 1); }

void store_row(const Op& op, void* dst) {
  if (op.value == 0) {
    zero_fill(dst, op.count * op.elem);  // zero_fill.cpp: no CPU time in proportion to the size
  } else if (op.elem == 1) {
    std::memset(dst, static_cast<int>(op.value & 0xff), op.count);
  } else if (op.elem == 2) {
    // Typed stores (a memcpy call per element ran at ~160 MB/s and dominated every figure
    // that zero-filled memory, the pool's handovers among them).
    auto* d = static_cast<uint16_t*>(dst);
    std::fill(d, d + op.count, static_cast<uint16_t>(op.value));
  } else {
    auto* d = static_cast<uint32_t*>(dst);
    std::fill(d, d + op.count, op.value);
  }
}

// Row y of slice z of a pitched operand.
template <typename T>
T* row_at(T* base, size_t pitch, size_t slice, size_t y, size_t z) {
  using Byte = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(base) + z * slice + y * pitch);
}

size_t extent(const Op& op, size_t pitch, size_t slice, size_t row_bytes) {
  return (op.depth - 1) * slice + (op.height - 1) * pitch + row_bytes;
}

}  // namespace

size_t dst_extent(const Op& op) {
  return extent(op, op.dst_pitch, op.dst_slice, op.kind == Op::set ? op.count * op.elem : op.bytes);
}
size_t src_extent(const Op& op) { return extent(op, op.src_pitch, op.src_slice, op.bytes); }

void note_device_operands(Op& op) {
  op.dst_device = op.dst && valid_device_range(reinterpret_cast<CUdeviceptr>(op.dst), dst_extent(op));
  op.src_device = op.kind == Op::copy && op.src &&
                  valid_device_range(reinterpret_cast<CUdeviceptr>(op.src), src_extent(op));
}

bool device_operands_valid(const Op& op) {
  if (op.dst_device && !valid_device_range(reinterpret_cast<CUdeviceptr>(op.dst), dst_extent(op))) return false;
  return !op.src_device || valid_device_range(reinterpret_cast<CUdeviceptr>(op.src), src_extent(op));
}

void sleep_until_ns(uint64_t deadline_ns) {
  // Short waits spin: a sleep returns ~0.1 ms late on a loaded CPU, longer than what is timed
  // (a launch latency, a 2 µs kernel, a small copy).
  constexpr uint64_t kSpinBelowNs = 20000;
  for (uint64_t t = now_ns(); t < deadline_ns && deadline_ns - t < kSpinBelowNs; t = now_ns()) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  if (now_ns() >= deadline_ns) return;
  timespec ts{static_cast<time_t>(deadline_ns / 1000000000ull), static_cast<long>(deadline_ns % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void run_memset(const Op& op) {
  uint64_t start = now_ns();
  for (size_t z = 0; z < op.depth; ++z)
    for (size_t y = 0; y < op.height; ++y) store_row(op, row_at(op.dst, op.dst_pitch, op.dst_slice, y, z));
  // A memset is a kernel streaming its bytes into device memory once: the rest of its time is
  // spent on the GPU, where it contends with other processes' kernels as any kernel does.
  uint64_t model = transfer_ns(op.count * op.elem * op.height * op.depth, settings().device_gbps);
  uint64_t spent = now_ns() - start;
  // Always called: engine.cpp counted this memset as queued GPU work.
  run_on_gpu(op.launch.device, model > spent ? model - spent : 0, static_cast<unsigned>(settings().sms));
}

void run_copy(const Op& op) {
  uint64_t start = now_ns();
  for (size_t z = 0; z < op.depth; ++z)
    for (size_t y = 0; y < op.height; ++y)
      std::memmove(row_at(op.dst, op.dst_pitch, op.dst_slice, y, z), row_at(op.src, op.src_pitch, op.src_slice, y, z),
                   op.bytes);
  bool from_device = is_device_memory(op.src), to_device = is_device_memory(op.dst);
  size_t total = op.bytes * op.height * op.depth;
  uint64_t model = 0;
  if (from_device && to_device) model = transfer_ns(2 * total, settings().device_gbps);  // read and written
  else if (from_device || to_device) model = transfer_ns(total, settings().pcie_gbps);
  // The copy engines run beside the SMs: a copy occupies its stream, not the GPU's kernels.
  sleep_until_ns(start + model);
}

void wait_for_launch_latency(const Op& op) {
  uint64_t ready = op.queued_ns + settings().launch_latency_ns;
  if (now_ns() < ready) sleep_until_ns(ready);  // behind other work, it has long passed
}

}  // namespace simgpu
