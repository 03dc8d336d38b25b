// Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64,
// cuStreamBatchMemOp): a write stores the value when the stream reaches it; a wait holds the
// stream until the condition holds on the word, which another stream, process (shared
// memory) or the host may write. Waits poll every 20 µs; like a real GPU, a wait whose
// condition never comes true holds its stream, but here only for 60 s, after which it gives
// up with an error in the log, so that a test fails instead of hanging.
#include <time.h>

#include <atomic>
#include <cstring>

#include "sim.h"

namespace simgpu {
namespace {

constexpr uint64_t kWaitLimitNs = 60ull * 1000000000ull;

struct MemOp {
  CUstreamBatchMemOpType type;
  CUdeviceptr address;
  uint64_t value;
  unsigned flags;
};

bool condition_holds(const MemOp& op) {
  uint64_t now;
  if (op.type == CU_STREAM_MEM_OP_WAIT_VALUE_64)
    now = __atomic_load_n(reinterpret_cast<uint64_t*>(op.address), __ATOMIC_ACQUIRE);
  else
    now = __atomic_load_n(reinterpret_cast<uint32_t*>(op.address), __ATOMIC_ACQUIRE);
  bool wide = op.type == CU_STREAM_MEM_OP_WAIT_VALUE_64;
  switch (op.flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH)) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return wide ? static_cast<int64_t>(now - op.value) >= 0
                  : static_cast<int32_t>(static_cast<uint32_t>(now) - static_cast<uint32_t>(op.value)) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return now == op.value;
    case CU_STREAM_WAIT_VALUE_AND: return (now & op.value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR: return wide ? ~(now | op.value) != 0 : static_cast<uint32_t>(~(now | op.value)) != 0;
    default: return true;
  }
}

void run_memop(void* p) {
  auto* op = static_cast<MemOp*>(p);
  if (op->type == CU_STREAM_MEM_OP_WRITE_VALUE_32) {
    __atomic_store_n(reinterpret_cast<uint32_t*>(op->address), static_cast<uint32_t>(op->value), __ATOMIC_RELEASE);
  } else if (op->type == CU_STREAM_MEM_OP_WRITE_VALUE_64) {
    __atomic_store_n(reinterpret_cast<uint64_t*>(op->address), op->value, __ATOMIC_RELEASE);
  } else if (op->type == CU_STREAM_MEM_OP_WAIT_VALUE_32 || op->type == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
    uint64_t deadline = now_ns() + kWaitLimitNs;
    while (!condition_holds(*op)) {
      if (now_ns() > deadline) {
        log(0, "cuStreamWaitValue on %#llx never satisfied in 60 s: giving up",
            static_cast<unsigned long long>(op->address));
        break;
      }
      timespec ts{0, 20000};
      nanosleep(&ts, nullptr);
    }
  }
  // Barriers and remote-write flushes: host memory is coherent, nothing to do.
  delete op;
}

CUresult submit_memop(CUstream s, bool per_thread, const MemOp& op) {
  bool is_wait = op.type == CU_STREAM_MEM_OP_WAIT_VALUE_32 || op.type == CU_STREAM_MEM_OP_WAIT_VALUE_64;
  bool is_write = op.type == CU_STREAM_MEM_OP_WRITE_VALUE_32 || op.type == CU_STREAM_MEM_OP_WRITE_VALUE_64;
  if ((is_wait || is_write) && !op.address) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  Op o;
  o.kind = Op::host;
  o.host_fn = run_memop;
  o.host_data = new MemOp(op);
  CUresult r = submit(st, o);
  if (r != CUDA_SUCCESS) delete static_cast<MemOp*>(o.host_data);
  return r;
}

CUresult batch(CUstream s, unsigned count, CUstreamBatchMemOpParams* ops, bool per_thread) {
  if (!ops && count) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& p = ops[i];
    MemOp op{p.operation, 0, 0, 0};
    if (p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 || p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
      op.address = p.waitValue.address;
      op.value = p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 ? p.waitValue.value64 : p.waitValue.value;
      op.flags = p.waitValue.flags;
    } else if (p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 || p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64) {
      op.address = p.writeValue.address;
      op.value = p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? p.writeValue.value64 : p.writeValue.value;
      op.flags = p.writeValue.flags;
    }
    if (CUresult r = submit_memop(s, per_thread, op); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;

#define MEMOP_PAIR(name, params, call)                                                   \
  SIM_API CUresult name params { [[maybe_unused]] const bool per_thread = false; return call; } \
  SIM_API CUresult name##_ptsz params { [[maybe_unused]] const bool per_thread = true; return call; }

MEMOP_PAIR(cuStreamWaitValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WAIT_VALUE_32, a, v, f}))
MEMOP_PAIR(cuStreamWaitValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WAIT_VALUE_64, a, v, f}))
MEMOP_PAIR(cuStreamWriteValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WRITE_VALUE_32, a, v, f}))
MEMOP_PAIR(cuStreamWriteValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WRITE_VALUE_64, a, v, f}))
MEMOP_PAIR(cuStreamBatchMemOp_v2, (CUstream s, unsigned n, CUstreamBatchMemOpParams* ops, unsigned),
           batch(s, n, ops, per_thread))
// The v1 entry points (before CUDA 11.7) take the same arguments.
MEMOP_PAIR(cuStreamWaitValue32, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WAIT_VALUE_32, a, v, f}))
MEMOP_PAIR(cuStreamWaitValue64, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WAIT_VALUE_64, a, v, f}))
MEMOP_PAIR(cuStreamWriteValue32, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WRITE_VALUE_32, a, v, f}))
MEMOP_PAIR(cuStreamWriteValue64, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f),
           submit_memop(s, per_thread, MemOp{CU_STREAM_MEM_OP_WRITE_VALUE_64, a, v, f}))
MEMOP_PAIR(cuStreamBatchMemOp, (CUstream s, unsigned n, CUstreamBatchMemOpParams* ops, unsigned),
           batch(s, n, ops, per_thread))
