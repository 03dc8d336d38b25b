#include "pool_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <mutex>
#include <new>
#include <vector>

#include "chunk_pool.h"
#include "daemon_link.h"
#include "log.h"
#include "memory_quota.h"
#include "messages.h"
#include "progress.h"
#include "protocol.h"
#include "real_driver.h"
#include "settings.h"
#include "stream_registry.h"
#include "zico_gate.h"
#include "capture_state.h"

namespace tandem::hook {

namespace {

using memory::ChunkPool;
using memory::GrantedChunk;

// The current context as a number, 0 when none: with it a StreamTag names a context's legacy stream.
uint64_t current_context() noexcept {
  CUcontext ctx = nullptr;
  return g_real.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS ? reinterpret_cast<uintptr_t>(ctx) : 0;
}

// The pool's driver calls. The zero stream is used under the chunk lock only; markers are
// recorded, queried and recycled under the allocation lock only (so the state here needs no lock).
class RealPoolDriver final : public memory::PoolDriver {
 public:
  explicit RealPoolDriver(CUdevice device) : device_(device) {
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = device;
    prop_.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    access_.location = prop_.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  const CUmemAllocationProp& prop() const { return prop_; }

  bool reserve(uint64_t bytes, uint64_t& base) override {
    CUdeviceptr p = 0;
    if (g_real.cuMemAddressReserve(&p, bytes, 0, 0, 0) != CUDA_SUCCESS) return false;
    base = p;
    return true;
  }
  bool create(uint64_t bytes, uint64_t& handle) override {
    CUmemGenericAllocationHandle h = 0;
    if (g_real.cuMemCreate(&h, bytes, &prop_, 0) != CUDA_SUCCESS) return false;
    handle = h;
    return true;
  }
  int export_fd(uint64_t handle) override {
    int fd = -1;
    return g_real.cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
                   CUDA_SUCCESS
               ? fd
               : -1;
  }
  bool import_fd(int fd, uint64_t& handle) override {
    CUmemGenericAllocationHandle h = 0;
    void* os_handle = reinterpret_cast<void*>(static_cast<intptr_t>(fd));  // the fd, by value
    if (g_real.cuMemImportFromShareableHandle(&h, os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
        CUDA_SUCCESS)
      return false;
    handle = h;
    return true;
  }
  bool map(uint64_t va, uint64_t bytes, uint64_t handle) override {
    return g_real.cuMemMap(va, bytes, 0, handle, 0) == CUDA_SUCCESS;
  }
  bool set_access(uint64_t va, uint64_t bytes) override {
    return g_real.cuMemSetAccess(va, bytes, &access_, 1) == CUDA_SUCCESS;
  }
  void unmap(uint64_t va, uint64_t bytes) override { g_real.cuMemUnmap(va, bytes); }
  void release(uint64_t handle) override { g_real.cuMemRelease(handle); }
  // On a stream of the pool's own, on the GPU; zero_wait() waits for them all: the
  // application's streams (non-blocking ones included) must see zeros from their first use.
  bool zero_async(uint64_t va, uint64_t bytes) override {
    if (!zero_stream_ && g_real.cuStreamCreate(&zero_stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      zero_stream_ = nullptr;
      return false;
    }
    return g_real.cuMemsetD8Async(va, 0, bytes, zero_stream_) == CUDA_SUCCESS;
  }
  bool zero_wait() override { return !zero_stream_ || g_real.cuStreamSynchronize(zero_stream_) == CUDA_SUCCESS; }
  void* record(void* stream, bool per_thread) override {
    Marker* m = new_marker();
    if (!add_event(m, static_cast<CUstream>(stream), per_thread)) return recycle(m), nullptr;
    return m;
  }
  // Not while a capture is open (the event would join it), nor on a handle that may name
  // another stream now, nor on the legacy stream of another context than the current one.
  void* record_later(void* stream, bool per_thread, const memory::StreamTag& tag) override {
    if (g_open_captures.load(std::memory_order_acquire) > 0 || tag.epoch != stream_destructions()) return nullptr;
    if (tag.stream == 1 && current_context() != tag.context) return nullptr;
    return record(stream, per_thread);
  }
  // The legacy stream waits for every blocking stream's earlier work, per-thread default
  // streams included; each non-blocking stream gets an event of its own. Not while any
  // capture is open: an event on the legacy stream would join or invalidate it.
  void* record_all() override {
    if (g_open_captures.load(std::memory_order_acquire) > 0) return nullptr;
    CUstream streams[kMaxTrackedStreams];
    int count = 0;
    if (!nonblocking_streams(streams, count)) return nullptr;
    Marker* m = new_marker();
    if (!add_event(m, CU_STREAM_LEGACY, false)) return recycle(m), nullptr;
    for (int i = 0; i < count; ++i)
      if (!add_event(m, streams[i], false)) return recycle(m), nullptr;  // another context's stream
    return m;
  }
  bool done(void* marker) override {
    auto* m = static_cast<Marker*>(marker);
    for (int i = 0; i < m->count; ++i)
      if (g_real.cuEventQuery(m->events[i]) == CUDA_ERROR_NOT_READY) return false;
    return true;
  }
  void recycle(void* marker) override {
    auto* m = static_cast<Marker*>(marker);
    for (int i = 0; i < m->count; ++i) events_.push_back(m->events[i]);
    m->count = 0;
    spare_markers_.push_back(m);
  }
  // Not while a capture is open: synchronizing a context any of whose streams captures is
  // invalid in every capture mode and invalidates the capture (CUDA's programming guide).
  bool synchronize() override {
    if (g_open_captures.load(std::memory_order_acquire) > 0) return false;
    uint64_t destroyed = stream_destructions();
    if (g_real.cuCtxSynchronize() != CUDA_SUCCESS) return false;
    stream_registry_synchronized(destroyed);  // their work is done too
    return true;
  }

 private:
  CUdevice device_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  CUstream zero_stream_ = nullptr;
  // A marker is one event, or (record_all) one per stream that could touch the block.
  struct Marker {
    CUevent events[1 + kMaxTrackedStreams];
    int count = 0;
  };
  Marker* new_marker() {
    if (spare_markers_.empty()) return new Marker();
    Marker* m = spare_markers_.back();
    spare_markers_.pop_back();
    return m;
  }
  bool add_event(Marker* m, CUstream s, bool per_thread) {
    CUevent e = nullptr;
    if (!events_.empty()) {
      e = events_.back();
      events_.pop_back();
    } else if (g_real.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      return false;
    }
    if ((per_thread ? g_real.cuEventRecord_ptsz(e, s) : g_real.cuEventRecord(e, s)) != CUDA_SUCCESS) {
      events_.push_back(e);
      return false;
    }
    m->events[m->count++] = e;
    return true;
  }
  std::vector<CUevent> events_;
  std::vector<Marker*> spare_markers_;
};

// tandemd's side, over the registration socket (fails, and the pool makes its own chunks,
// while there is no daemon).
class DaemonBroker final : public memory::PoolBroker {
  // Every request carries a number its replies repeat: a reply to an earlier request that
  // timed out here is recognized and dropped (its descriptor closed), never taken for this one.
  std::atomic<uint64_t> seq_{0};

  struct Replies {
    uint64_t seq = 0;
    std::vector<GrantedChunk> chunks;
    std::string reason;
    bool waited = false;  // tandemd asked training for memory, and the answer came short
    uint64_t id = 0;
  };
  static void close_all(const int* fds, size_t count) {
    for (size_t i = 0; i < count; ++i) close(fds[i]);
  }
  // The reply `m` of type T to this request; false when it is another type, not a valid one
  // (msg::decode), or an earlier request's: such a reply is dropped.
  template <class T>
  static bool decoded(const Replies& r, uint32_t type, const std::string& payload, T& m) {
    msg::Refusal invalid;
    return type == static_cast<uint32_t>(T::type) && msg::decode(payload, m, invalid) && m.seq == r.seq;
  }

 public:
  bool linked() override { return current_slot() != nullptr; }

  std::vector<GrantedChunk> acquire(uint64_t bytes, uint64_t chunk_bytes) override {
    Replies replies;
    replies.seq = ++seq_;
    auto on_reply = [](uint32_t type, const std::string& payload, const int* fds, size_t count, void* user) {
      auto& r = *static_cast<Replies*>(user);
      // pool_chunk: one {"id"} and its fd, or (a batch) {"ids"} and an fd per id; every fd is
      // closed when they do not match.
      if (msg::PoolChunk chunk; decoded(r, type, payload, chunk)) {
        if (!count || chunk.ids.size() != count) close_all(fds, count);
        else
          for (size_t i = 0; i < count; ++i) r.chunks.push_back(GrantedChunk{fds[i], chunk.ids[i]});
        return true;  // more chunks, then pool_granted
      }
      close_all(fds, count);
      msg::PoolGranted granted;
      if (!decoded(r, type, payload, granted)) return true;  // keep reading for ours
      if (granted.short_bytes) r.reason = granted.reason;
      r.waited = granted.short_bytes && granted.waited_ms;
      return false;  // pool_granted ends the answer
    };
    int wait_ms = static_cast<int>(setting_ns(SettingId::TANDEM_MEM_HANDOVER_MS) / kNsPerMs);
    // "batch": many chunks to a message (a handover's cost does not grow a message per chunk).
    const std::string request =
        msg::encode(msg::PoolAcquire{bytes, chunk_bytes, replies.seq, static_cast<uint64_t>(wait_ms), true});
    if (request.empty()) return {};
    int timeout_ms = wait_ms + 1000;  // tandemd answers by wait_ms
    uint64_t start = monotonic_ns();
    daemon_exchange(static_cast<uint32_t>(MessageType::pool_acquire), request, -1, timeout_ms, on_reply, &replies);
    TANDEM_LOG_DEBUG("memory pool: asked tandemd for {} MiB, got {} chunks in {:.2f} ms", bytes >> 20,
                     replies.chunks.size(), static_cast<double>(monotonic_ns() - start) / 1e6);
    // Only online inference takes memory from others; the rest are told "no free chunks" as a
    // matter of course (a training job at its quota, at every allocation that misses). A wait
    // that came up short is rare and explains the out-of-memory error that may follow: it
    // names the process that kept the memory.
    if (replies.waited)
      TANDEM_LOG_WARN("memory pool: tandemd asked training for {} MiB and is short: {}", bytes >> 20, replies.reason);
    else if (!replies.reason.empty() && g_role == TANDEM_ROLE_INFERENCE)
      TANDEM_LOG_INFO("memory pool: tandemd is short: {}", replies.reason);
    else if (!replies.reason.empty())
      TANDEM_LOG_DEBUG("memory pool: tandemd is short: {}", replies.reason);
    return replies.chunks;
  }

  uint64_t register_chunk(int fd, uint64_t bytes) override {
    Replies replies;
    replies.seq = ++seq_;
    auto on_reply = [](uint32_t type, const std::string& payload, const int* fds, size_t count, void* user) {
      auto& r = *static_cast<Replies*>(user);
      close_all(fds, count);
      msg::PoolRegistered registered;
      if (!decoded(r, type, payload, registered)) return true;
      r.id = registered.id;
      return false;
    };
    const std::string request = msg::encode(msg::PoolRegister{bytes, replies.seq});
    if (request.empty()) return 0;
    daemon_exchange(static_cast<uint32_t>(MessageType::pool_register), request, fd, 2000, on_reply, &replies);
    return replies.id;
  }

  void release(const std::vector<uint64_t>& ids) override {
    Replies replies;
    replies.seq = ++seq_;
    auto on_reply = [](uint32_t type, const std::string& payload, const int* fds, size_t count, void* user) {
      close_all(fds, count);
      msg::PoolReleased released;
      return !decoded(*static_cast<Replies*>(user), type, payload, released);
    };
    // Not linked (tandemd went away): its descriptors went with it; the chunks are gone.
    const std::string request = msg::encode(msg::PoolRelease{ids, replies.seq});
    if (request.empty()) return;
    daemon_exchange(static_cast<uint32_t>(MessageType::pool_release), request, -1, 2000, on_reply, &replies);
  }
};

std::mutex g_init_mutex;
std::atomic<int> g_state{0};  // 0: not set up yet, 1: serving, -1: off
ChunkPool* g_pool = nullptr;  // set once, never destroyed (frees may come during exit)
CUdevice g_pool_device = 0;   // the device whose memory its chunks are (set with g_pool)
uint64_t g_watermark = 0;  // TANDEM_MEM_WATERMARK in bytes, read at set-up

void turn_off(const char* why) {
  TANDEM_LOG_WARN("memory pool off, allocations pass through to the driver: {}", why);
  g_state.store(-1, std::memory_order_release);
}

// Bounded: a process with a role registers on its progress thread, which starts with the
// first launch or (here) the first pooled allocation; chunks made before the link would not
// be tandemd's to move.
void wait_for_first_link_attempt(CUcontext ctx) {
  if (g_role == TANDEM_ROLE_NONE) return;
  CUcontext expected = nullptr;
  g_notes.context.compare_exchange_strong(expected, ctx, std::memory_order_acq_rel);
  start_progress_thread();
  uint64_t deadline = monotonic_ns() + 1000000000ull;
  while (g_link_attempts.load(std::memory_order_acquire) == 0 && monotonic_ns() < deadline) {
    timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
}

// Under g_init_mutex. True when the pool serves from now on.
bool set_up() {
  if (!setting_bool(SettingId::TANDEM_MEM_POOL)) {  // not asked for: off, silently
    g_state.store(-1, std::memory_order_release);
    return false;
  }
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (g_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx || g_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
    return false;  // no context yet: the driver will refuse the allocation anyway; try next time
  int vmm = 0, fds = 0;
  g_real.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  g_real.cuDeviceGetAttribute(&fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
  if (!vmm) return turn_off("the device does not support virtual memory management"), false;
  if (!fds) return turn_off("the device cannot export memory as POSIX file descriptors"), false;
  MemorySize chunk_setting;
  parse_memory_size(setting_text(SettingId::TANDEM_MEM_CHUNK), chunk_setting);
  auto* driver = new RealPoolDriver(dev);
  size_t granularity = 0;
  if (g_real.cuMemGetAllocationGranularity(&granularity, &driver->prop(), CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
          CUDA_SUCCESS ||
      !granularity)
    return turn_off("the driver gives no allocation granularity"), false;
  uint64_t chunk = chunk_setting.is_percent ? 0 : chunk_setting.bytes;
  if (!chunk || chunk % granularity) {
    TANDEM_LOG_WARN("TANDEM_MEM_CHUNK={} is not a multiple of the granularity ({} bytes)",
                    setting_text(SettingId::TANDEM_MEM_CHUNK), granularity);
    return turn_off("bad TANDEM_MEM_CHUNK"), false;
  }
  size_t total = 0;
  g_real.cuDeviceTotalMem_v2(&total, dev);
  // Twice the device: room for runs next to a fragmented middle; address space is cheap.
  uint64_t va = (2 * static_cast<uint64_t>(total) + chunk - 1) / chunk * chunk;
  MemorySize w;
  parse_memory_size(setting_text(SettingId::TANDEM_MEM_WATERMARK), w);
  g_watermark = w.is_percent ? 0 : w.bytes;
  wait_for_first_link_attempt(ctx);
  static DaemonBroker broker;
  auto* pool = new ChunkPool(*driver, broker, chunk, va);
  const char* why = "";
  if (!pool->init(&why)) return turn_off(why), false;
  g_pool = pool;
  g_pool_device = dev;
  g_state.store(1, std::memory_order_release);
  TANDEM_LOG_INFO("memory pool on: {} MiB chunks, {} GiB of addresses, {}", chunk >> 20, va >> 30,
                  broker.linked() ? "shared through tandemd" : "no tandemd yet (chunks stay local)");
  return true;
}

// Whether the chunks held over the quota are asked back now: from the time tandemd sets the
// quota (lowered, or set again: the slot's memory_wake moves) until they are back or
// TANDEM_MEM_HANDOVER_MS passed (tandemd's waiter has had its answer by then). Not otherwise:
// between a job's steps its pending frees and partly used chunks put it over its quota, and
// what it gave back then came again at its next allocation from tandemd's free chunks, which
// nobody was waiting for (PyTorch beside a model server: 4010 chunks given back and 3981
// received again in 16 s, with 1923 device synchronizations to trim them). tandemd counts
// what a process holds over its quota as owed and asks for it when someone needs memory.
// Without tandemd nobody asks, and the quota (TANDEM_MEM_LIMIT) is a static partition of the
// device: what is held over it goes back to the driver at every tick, for the neighbours.
// Progress thread only.
bool over_quota_asked(uint64_t held, uint64_t quota) {
  static uint32_t wake_seen = 0;
  static uint64_t quota_seen = 0, asked_until_ns = 0;
  const tandem_slot* slot = current_slot();
  if (!slot) return quota && held > quota;
  uint32_t wake = __atomic_load_n(&slot->memory_wake, __ATOMIC_ACQUIRE);
  uint64_t now = monotonic_ns();
  // A program that frees on request and still holds live memory over its quota frees it at
  // its next safe point, possibly later than the bound: its chunks go back then.
  if (wake != wake_seen || quota != quota_seen || memory_owed()) {
    wake_seen = wake;
    quota_seen = quota;
    asked_until_ns = now + setting_ns(SettingId::TANDEM_MEM_HANDOVER_MS);
  }
  if (!quota || held <= quota) asked_until_ns = 0;  // given back: the ask is answered
  return now < asked_until_ns;
}

}  // namespace

bool pool_serves() noexcept {
  int state = g_state.load(std::memory_order_acquire);
  if (state) return state > 0;
  try {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    if ((state = g_state.load(std::memory_order_acquire))) return state > 0;
    return set_up();
  } catch (...) {
    return false;
  }
}

bool pool_device_current() noexcept {
  CUdevice dev = -1;
  if (g_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return false;  // no context: the driver answers
  if (dev == g_pool_device) return true;
  static std::atomic<bool> logged{false};
  if (!logged.exchange(true))
    TANDEM_LOG_WARN("memory pool serves GPU {} only: allocations made while GPU {} is current go to the driver",
                    g_pool_device, dev);
  return false;
}

uint64_t pool_charge(uint64_t bytes) noexcept { return memory::RangeAllocator::rounded(bytes ? bytes : 1); }

memory::StreamTag pool_stream_tag(CUstream s, bool per_thread) noexcept {
  if (s == CU_STREAM_PER_THREAD || (per_thread && s == nullptr)) return {};  // the calling thread's
  memory::StreamTag tag;
  tag.epoch = stream_destructions();
  if (s == nullptr || s == CU_STREAM_LEGACY) {  // the current context's legacy stream
    tag.context = current_context();
    if (!tag.context) return {};
    tag.stream = 1;
  } else {
    tag.stream = reinterpret_cast<uintptr_t>(s);
  }
  return tag;
}

// The fast path: no system call, no lock the progress thread takes, no daemon (chunk_pool.h).
// While a capture is open the application's thread may be capturing in global mode (PyTorch
// takes a segment while it captures a CUDA graph): the pool's own driver calls (a freed block's
// markers asked, a received chunk's zero-fill waited for) are made in relaxed mode, else the
// driver would invalidate the capture. Outside captures the scope costs one atomic load.
CUdeviceptr pool_allocate(uint64_t bytes, const memory::StreamTag& stream) noexcept {
  RelaxedCaptureScope relaxed;
  try {
    return g_pool->allocate(bytes, stream);
  } catch (...) {
    return 0;
  }
}

uint64_t pool_idle_bytes() noexcept { return g_state.load(std::memory_order_acquire) > 0 ? g_pool->idle_bytes() : 0; }

bool pool_owns(CUdeviceptr ptr) noexcept { return g_state.load(std::memory_order_acquire) > 0 && g_pool->owns(ptr); }

bool pool_free(CUdeviceptr ptr, bool ordered, CUstream s, bool per_thread, uint64_t* bytes,
               const memory::StreamTag& tag) noexcept {
  RelaxedCaptureScope relaxed;  // as pool_allocate
  try {
    return g_pool->free(ptr, ordered, s, per_thread, bytes, tag);
  } catch (...) {
    return false;
  }
}

void pool_tick() noexcept {
  if (g_state.load(std::memory_order_acquire) <= 0) return;
  try {
    uint64_t held = 0, live = 0;
    g_pool->usage(held, live);
    uint64_t quota = memory_quota();
    bool asked = over_quota_asked(held, quota);
    if (quota && held > quota && asked) {  // give back what is idle
      uint64_t start = monotonic_ns();
      uint64_t released = g_pool->try_trim(quota, true);
      if (released)
        TANDEM_LOG_DEBUG("memory pool: gave back {} MiB for a quota of {} MiB in {:.2f} ms", released >> 20,
                         quota >> 20, static_cast<double>(monotonic_ns() - start) / 1e6);
      return;
    }
    // Zico: while tandemd time-shifts this training job, what its backward pass freed goes
    // back at once, for the other job's forward pass.
    uint64_t unused = held - std::min(held, live);
    if (zico_sharing(current_slot()) && unused >= g_pool->chunk_bytes()) {
      g_pool->try_trim(live, true);
      return;
    }
    // SIRIUS's InferRelease: memory not in use is kept up to 2W, then given back down to W.
    // Blocks freed with cuMemFree wait for a synchronization, which trimming takes: an idle
    // server synchronizes nothing else, and its freed models must still go back.
    if (g_role == TANDEM_ROLE_INFERENCE && unused >= 2 * g_watermark && unused > g_watermark &&
        unused >= g_pool->chunk_bytes())
      g_pool->try_trim(held - (unused - g_watermark), true);
  } catch (...) {
  }
}

void pool_after_fork_child() noexcept {
  new (&g_init_mutex) std::mutex();  // only this thread exists in the child
  g_pool = nullptr;                  // the parent's, left as it is (never destroyed anyway)
  g_state.store(0, std::memory_order_release);
}

bool pool_device(CUdevice* dev) noexcept {
  if (g_state.load(std::memory_order_acquire) <= 0) return false;
  *dev = g_pool_device;
  return true;
}

PoolLevels pool_levels() noexcept {
  PoolLevels l;
  if (g_state.load(std::memory_order_acquire) <= 0) return l;
  g_pool->usage(l.held, l.live);
  g_pool->peaks(l.held_peak, l.live_peak);
  return l;
}

void pool_reset_peaks(bool held, bool live) noexcept {
  if (g_state.load(std::memory_order_acquire) > 0) g_pool->reset_peaks(held, live);
}

uint64_t pool_trim_to(uint64_t keep_bytes) noexcept {
  if (g_state.load(std::memory_order_acquire) <= 0) return 0;
  try {
    return g_pool->trim(keep_bytes, true);
  } catch (...) {
    return 0;
  }
}

uint64_t pool_working_set(uint64_t now_ns) noexcept {
  constexpr uint64_t kWindowNs = 2000000000ull;
  static uint64_t window_start = 0, current = 0, previous = 0;  // the progress thread's alone
  if (g_state.load(std::memory_order_acquire) <= 0) return 0;
  current = std::max(current, g_pool->take_window_peak());
  if (now_ns - window_start >= kWindowNs) {
    previous = current;
    current = 0;
    window_start = now_ns;
  }
  return std::max(previous, current);
}

PoolFigures pool_figures() noexcept {
  PoolFigures f;
  if (g_state.load(std::memory_order_acquire) <= 0) return f;
  f.on = true;
  f.pool = g_pool->stats();
  return f;
}

}  // namespace tandem::hook
