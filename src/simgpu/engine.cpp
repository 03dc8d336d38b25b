// The execution engine: every stream is an in-order queue run by its own worker thread.
// The legacy stream synchronizes with blocking streams (it waits for their earlier work and
// they wait for its), as on a real GPU; the per-thread default stream is one stream per host
// thread. Events complete when their stream has run everything queued before them.
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>

#include "sim.h"

namespace simgpu {

namespace {

ProcessMutex g_registry_mutex;
std::vector<Stream*>* g_streams = new std::vector<Stream*>();  // never destroyed
Stream* g_legacy = nullptr;
thread_local Stream* t_per_thread = nullptr;
thread_local pid_t t_per_thread_pid = 0;

void execute(Stream* s, Op& op) {
  switch (op.kind) {
    case Op::kernel: {
      unsigned blocks = op.launch.grid[0] * op.launch.grid[1] * op.launch.grid[2];
      unsigned sms = op.launch.fn && op.launch.fn->nccl ? 4u : blocks;
      if (sms > static_cast<unsigned>(settings().sms)) sms = static_cast<unsigned>(settings().sms);
      wait_for_launch_latency(op);  // transfers.cpp
      if (sms == 0) sms = 1;
      s->running_kernels.fetch_add(1);
      if (op.launch.fn && op.launch.fn->nccl) {
        sms = std::min(sms, op.launch.sm_limit ? op.launch.sm_limit : sms);
        run_nccl_kernel(op.launch, sms);  // collectives.cpp
      } else {
        uint64_t ns = kernel_cost_ns(op.launch);
        fit_to_sm_limit(op.launch.sm_limit, &sms, &ns);  // MPS: its context's SMs at most (sm_limit.cpp)
        // A spin kernel's blocks all spin its time at once: one wave, whatever its grid.
        unsigned waves = op.launch.fn && op.launch.fn->spin ? 1u : (blocks + sms - 1) / sms;
        run_on_gpu(op.launch.device, ns, sms, waves);
        // The one kernel with an effect: its result depends on the order kernels ran in.
        if (op.launch.mix_word) *op.launch.mix_word = *op.launch.mix_word * 31 + op.launch.mix_value;
      }
      s->running_kernels.fetch_sub(1);
      break;
    }
    case Op::copy: run_copy(op); break;   // transfers.cpp
    case Op::set: run_memset(op); break;  // transfers.cpp: GPU work, like a kernel
    case Op::record: op.event->time_ns.store(static_cast<int64_t>(now_ns())); break;
    case Op::wait: {
      Stream* w = op.wait_stream;
      std::unique_lock<std::mutex> lock(w->m);
      w->cv.wait(lock, [&] { return w->completed.load() >= op.wait_seq; });
      break;
    }
    case Op::host: op.host_fn(op.host_data); break;
    case Op::free_mem: break;
  }
}

void worker_main(Stream* s) {
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // 1 µs: kernel durations are timed sleeps
  std::unique_lock<std::mutex> lock(s->m);
  for (;;) {
    s->cv.wait(lock, [&] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty() && s->stop) return;
    Op op = s->queue.front();
    lock.unlock();
    execute(s, op);
    lock.lock();
    s->queue.pop_front();
    s->completed.fetch_add(1);
    s->cv.notify_all();
  }
}

// A stream created before fork() has no worker in the child: give it a fresh one.
void ensure_worker(Stream* s) {
  pid_t me = getpid();
  if (s->owner_pid == me) return;
  // The parent's mutex/thread objects are meaningless here; replace them without destroying.
  new (&s->m) std::mutex();
  new (&s->cv) std::condition_variable();
  new (&s->worker) std::thread();
  s->queue.clear();
  s->completed.store(s->enqueued);
  s->owner_pid = me;
  s->worker = std::thread(worker_main, s);
  s->worker.detach();
}

Stream* new_stream(bool blocking, bool legacy) {
  auto* s = new Stream();
  s->blocking = blocking;
  s->legacy = legacy;
  s->default_stream = legacy;
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  g_streams->push_back(s);
  return s;
}

std::vector<Stream*> all_streams() {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  return *g_streams;
}

void push(Stream* s, Op op) {
  ensure_worker(s);
  // Memsets run on the GPU like kernels (run_memset): both are accounted from here.
  if (op.kind == Op::kernel || op.kind == Op::set) kernel_queued(op.launch.device);
  op.queued_ns = now_ns();
  std::lock_guard<std::mutex> lock(s->m);
  s->queue.push_back(op);
  ++s->enqueued;
  s->cv.notify_all();
}

uint64_t enqueued_now(Stream* s) {
  std::lock_guard<std::mutex> lock(s->m);
  return s->enqueued;
}

// fork(): the child has none of the parent's threads; locks may have been held by them.
void after_fork_child() {
  unlock_process_mutexes_in_child();
  contention_after_fork_child();
}
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, after_fork_child);

}  // namespace

Stream* legacy_stream() {
  static std::once_flag once;
  std::call_once(once, [] { g_legacy = new_stream(true, true); });
  return g_legacy;
}

Stream* resolve_stream(CUstream handle, bool per_thread) {
  if (handle == CU_STREAM_LEGACY || (handle == nullptr && !per_thread)) return legacy_stream();
  if (handle == CU_STREAM_PER_THREAD || handle == nullptr) {
    if (!t_per_thread || t_per_thread_pid != getpid()) {
      t_per_thread = new_stream(true, false);
      t_per_thread->default_stream = true;
      t_per_thread_pid = getpid();
    }
    return t_per_thread;
  }
  auto* s = reinterpret_cast<Stream*>(handle);
  return s->magic == 0x5354524d ? s : nullptr;
}

Stream* create_stream(unsigned flags, int priority) {
  Stream* s = new_stream(!(flags & CU_STREAM_NON_BLOCKING), false);
  s->flags = flags;
  s->priority = priority;
  // Created while a green context's converted context is current: that green context's.
  if (Context* c = current_context()) s->green = c->green;
  return s;
}

void destroy_stream(Stream* s) {
  // A stream in a capture has nothing queued (its work went into the graph); destroying one
  // that joined a capture is allowed (NCCL does it) and leaves the capture as it is.
  if (!s->capture) synchronize_stream(s);
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  for (auto it = g_streams->begin(); it != g_streams->end(); ++it)
    if (*it == s) {
      g_streams->erase(it);
      break;
    }
  s->magic = 0;  // the worker stays parked: destroying a stream is rare, threads are cheap
}

uint64_t kernel_cost_ns(const KernelLaunch& k) {
  if (k.fn && k.fn->spin) return k.first_arg;
  const Settings& cfg = settings();
  uint64_t blocks = static_cast<uint64_t>(k.grid[0]) * k.grid[1] * k.grid[2];
  uint64_t waves = (blocks + cfg.sms - 1) / cfg.sms;
  uint64_t ns = waves * cfg.ns_per_block_wave;
  if (ns < cfg.min_kernel_ns) ns = cfg.min_kernel_ns;
  if (!cfg.deterministic) {
    static thread_local std::minstd_rand rng(static_cast<unsigned>(now_ns()));
    ns += ns * (rng() % 50) / 1000;  // up to +5% jitter, as real kernels vary
  }
  return ns;
}

CUresult submit(Stream* s, Op op) {
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (stream_context_destroyed(s)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (s->capture) {
    if (s->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    record_into_capture(s, op);
    return CUDA_SUCCESS;
  }
  if (s->legacy && unsafe_calls_prohibited()) return invalidate_capture(nullptr, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  // Implicit synchronization with the legacy stream.
  if (s->legacy) {
    // Streams of this process only: a parent's stream (before fork()) has no worker here, and
    // work it had queued would never complete here.
    for (Stream* b : all_streams())
      if (b != s && b->blocking && b->magic && b->owner_pid == getpid()) {
        uint64_t seq = enqueued_now(b);
        if (b->completed.load() < seq) {
          Op wait;
          wait.kind = Op::wait;
          wait.wait_stream = b;
          wait.wait_seq = seq;
          push(s, wait);
        }
      }
  } else if (s->blocking && g_legacy && g_legacy->owner_pid == getpid()) {
    uint64_t seq = enqueued_now(g_legacy);
    if (g_legacy->completed.load() < seq) {
      Op wait;
      wait.kind = Op::wait;
      wait.wait_stream = g_legacy;
      wait.wait_seq = seq;
      push(s, wait);
    }
  }
  if (op.kind == Op::record) {
    std::lock_guard<std::mutex> lock(op.event->m);
    op.event->stream = s;
    op.event->seq = enqueued_now(s) + 1;
    op.event->recorded = true;
    op.event->captured = false;
    op.event->time_ns.store(-1);
  }
  push(s, op);
  return CUDA_SUCCESS;
}

static void wait_for(Stream* s, uint64_t seq) {
  if (s->owner_pid != getpid()) return;  // nothing was ever queued on it in this process
  std::unique_lock<std::mutex> lock(s->m);
  s->cv.wait(lock, [&] { return s->completed.load() >= seq; });
}

CUresult synchronize_stream(Stream* s) {
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (stream_context_destroyed(s)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (s->capture) return invalidate_capture(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  if (s->legacy && unsafe_calls_prohibited()) return invalidate_capture(nullptr, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  if (s->legacy) {
    for (Stream* b : all_streams())
      if (b->blocking && b->magic) wait_for(b, enqueued_now(b));
  }
  wait_for(s, enqueued_now(s));
  return CUDA_SUCCESS;
}

CUresult query_stream(Stream* s) {
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (stream_context_destroyed(s)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (s->capture) return invalidate_capture(s, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  if (CUresult r = refuse_unsafe_call()) return r;
  return s->completed.load() >= enqueued_now(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult synchronize_all() {
  if (CUresult r = refuse_unsafe_call()) return r;
  for (Stream* s : all_streams())
    if (s->magic && s->owner_pid == getpid()) wait_for(s, enqueued_now(s));
  return CUDA_SUCCESS;
}

}  // namespace simgpu

using namespace simgpu;

// ---------------- streams ----------------
SIM_API CUresult cuStreamCreate(CUstream* s, unsigned int flags) {
  SIM_FAIL_POINT();
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = reinterpret_cast<CUstream>(create_stream(flags, 0));
  return CUDA_SUCCESS;
}
SIM_API CUresult cuStreamCreateWithPriority(CUstream* s, unsigned int flags, int priority) {
  SIM_FAIL_POINT();
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = reinterpret_cast<CUstream>(create_stream(flags, priority));
  return CUDA_SUCCESS;
}
SIM_API CUresult cuStreamDestroy_v2(CUstream s) {
  Stream* st = resolve_stream(s, false);
  if (!st || st->legacy) return CUDA_ERROR_INVALID_HANDLE;
  if (stream_context_destroyed(st)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;  // cuda.h: destroy them first
  destroy_stream(st);
  return CUDA_SUCCESS;
}
#define STREAM_PAIR(name, body_params, call)                                     \
  SIM_API CUresult name body_params { SIM_FAIL_POINT(); const bool per_thread = false; return call; } \
  SIM_API CUresult name##_ptsz body_params { SIM_FAIL_POINT(); const bool per_thread = true; return call; }

// The application's cuStreamSynchronize is potentially unsafe during a capture (the real driver
// refuses it and invalidates the capture); the simulator's own waits (a stream destroyed, a
// stream-ordered free) are not.
static CUresult stream_synchronize(Stream* s) {
  if (s && !s->capture && !s->legacy) {
    if (CUresult r = refuse_unsafe_call()) return r;
  }
  return synchronize_stream(s);
}
STREAM_PAIR(cuStreamSynchronize, (CUstream s), stream_synchronize(resolve_stream(s, per_thread)))
STREAM_PAIR(cuStreamQuery, (CUstream s), query_stream(resolve_stream(s, per_thread)))

static CUresult stream_flags(CUstream s, unsigned* flags, bool per_thread) {
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  *flags = st->flags;
  return CUDA_SUCCESS;
}
STREAM_PAIR(cuStreamGetFlags, (CUstream s, unsigned* flags), stream_flags(s, flags, per_thread))

static CUresult stream_priority(CUstream s, int* p, bool per_thread) {
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  *p = st->priority;
  return CUDA_SUCCESS;
}
STREAM_PAIR(cuStreamGetPriority, (CUstream s, int* p), stream_priority(s, p, per_thread))

static CUresult stream_wait_event(CUstream s, CUevent e, bool per_thread) {
  Stream* st = resolve_stream(s, per_thread);
  auto* ev = reinterpret_cast<Event*>(e);
  if (!st || !ev || ev->magic != 0x45564e54) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(ev->m);
  if (!ev->recorded || !ev->stream) return CUDA_SUCCESS;
  if (ev->captured) {
    // Joining a capture from another stream (fork/join capture).
    join_capture(st, ev->stream->capture);
    return CUDA_SUCCESS;
  }
  Op op;
  op.kind = Op::wait;
  op.wait_stream = ev->stream;
  op.wait_seq = ev->seq;
  return submit(st, op);
}
STREAM_PAIR(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned flags), stream_wait_event(s, e, per_thread))

static CUresult host_func(CUstream s, CUhostFn fn, void* data, bool per_thread) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  Op op;
  op.kind = Op::host;
  op.host_fn = fn;
  op.host_data = data;
  return submit(resolve_stream(s, per_thread), op);
}
STREAM_PAIR(cuLaunchHostFunc, (CUstream s, CUhostFn fn, void* data), host_func(s, fn, data, per_thread))

// ---------------- events ----------------
SIM_API CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  SIM_FAIL_POINT();
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  auto* ev = new Event();
  ev->flags = flags;
  *e = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}
SIM_API CUresult cuEventDestroy_v2(CUevent e) {
  auto* ev = reinterpret_cast<Event*>(e);
  if (!ev || ev->magic != 0x45564e54) return CUDA_ERROR_INVALID_HANDLE;
  ev->magic = 0;  // freed lazily: queued records may still point at it
  return CUDA_SUCCESS;
}
static CUresult event_record(CUevent e, CUstream s, bool per_thread) {
  if (torn_down()) return CUDA_ERROR_DEINITIALIZED;
  auto* ev = reinterpret_cast<Event*>(e);
  Stream* st = resolve_stream(s, per_thread);
  if (!ev || ev->magic != 0x45564e54 || !st) return CUDA_ERROR_INVALID_HANDLE;
  if (st->capture) {
    std::lock_guard<std::mutex> lock(ev->m);
    ev->stream = st;
    ev->recorded = true;
    ev->captured = true;
    return st->capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  }
  Op op;
  op.kind = Op::record;
  op.event = ev;
  return submit(st, op);
}
STREAM_PAIR(cuEventRecord, (CUevent e, CUstream s), event_record(e, s, per_thread))
STREAM_PAIR(cuEventRecordWithFlags, (CUevent e, CUstream s, unsigned flags), event_record(e, s, per_thread))

static CUresult event_state(Event* ev, bool wait) {
  if (torn_down()) return CUDA_ERROR_DEINITIALIZED;
  if (!ev || ev->magic != 0x45564e54) return CUDA_ERROR_INVALID_HANDLE;
  Stream* s;
  uint64_t seq;
  bool captured, recorded;
  {
    std::lock_guard<std::mutex> lock(ev->m);
    captured = ev->captured;
    recorded = ev->recorded;
    s = ev->stream;
    seq = ev->seq;
  }
  if (captured) return CUDA_ERROR_CAPTURED_EVENT;
  if (CUresult r = refuse_unsafe_call()) return r;
  if (!recorded) return CUDA_SUCCESS;
  if (!wait) return s->completed.load() >= seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  std::unique_lock<std::mutex> lock(s->m);
  s->cv.wait(lock, [&] { return s->completed.load() >= seq; });
  return CUDA_SUCCESS;
}
SIM_API CUresult cuEventQuery(CUevent e) { return event_state(reinterpret_cast<Event*>(e), false); }
SIM_API CUresult cuEventSynchronize(CUevent e) { return event_state(reinterpret_cast<Event*>(e), true); }

static CUresult elapsed(float* ms, CUevent a, CUevent b) {
  auto* start = reinterpret_cast<Event*>(a);
  auto* end = reinterpret_cast<Event*>(b);
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!start || !end || start->magic != 0x45564e54 || end->magic != 0x45564e54) return CUDA_ERROR_INVALID_HANDLE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  int64_t t0 = start->time_ns.load(), t1 = end->time_ns.load();
  if (t0 < 0 || t1 < 0) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>(t1 - t0) / 1e6f;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
SIM_API CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
