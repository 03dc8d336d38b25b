// A process's share of the node's GPU memory pool (DESIGN §6; SIRIUS §5, HARLI §4, Zico §6).
// Physical memory comes in chunks (cuMemCreate with POSIX fd handles, TANDEM_MEM_CHUNK each),
// mapped into one virtual range reserved at start, a chunk per slot of that range:
//   * a block of at most a chunk is sub-allocated inside a chunk (RangeAllocator);
//   * a larger one gets a run of whole chunks in consecutive slots (contiguous addresses,
//     separate physical chunks).
// Chunks come from tandemd (chunks other processes released: zero-filled here before use, as
// they change owner, one memset per contiguous run) or are created here and registered with
// tandemd, which keeps their fds.
// A freed block is reusable only after the GPU finished the work queued before the free:
// stream-ordered frees wait for a marker on their stream, plain frees (cuMemFree, which the
// driver itself synchronizes) for markers on every stream (PoolDriver::record_all), or where
// those cannot be had for a device synchronization, taken once for all of them when
// their memory is needed. A chunk leaves the process (trim) only when nothing in it is live
// and every free in it is known finished.
//
// Two locks, so that an allocation never waits for the chunk-level work of another thread:
//   * the allocation lock: the sub-allocators, live and pending blocks. Application threads
//     only; held for in-memory work, plus driver calls only on the slow path (a
//     synchronization, or growth).
//   * the chunk lock: mapping, unmapping, tandemd's chunk ids. Growth (under the allocation
//     lock) and trimming, which the progress thread does. Trimming never takes the
//     allocation lock: it claims an idle chunk through the slot's atomic use word (a chunk
//     with no live block and every free in it finished), which an allocation must also win
//     before it places a block in that chunk.
// The fast path (a block that fits in a held chunk, or a free) is the allocation lock, a
// compare-and-swap on the slot's use word and the sub-allocator: no system call, no driver
// call (but cuEventRecord for a free on a per-thread default stream), no daemon.
// Reuse in stream order: a block freed with a stream-ordered free serves, at once and without
// its marker, the next allocation of the same size on the same stream (the stream runs the
// work queued before the free first), as the driver's own stream-ordered pools do. Without it
// a training step's activations, freed and allocated again every step, waited for the GPU and
// the pool held about twice what the program used. Such a free's marker is recorded only when
// another allocation misses (PoolDriver::record_later): most of them are never needed.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "range_allocator.h"

namespace tandem::memory {

// The stream of a stream-ordered allocation or free, as far as reuse in stream order needs it:
// the stream (its handle, or 1 for a context's legacy stream), the context for a legacy
// stream, and how many streams the process had destroyed then (a handle may be reused after a
// destruction). stream 0: none that can be named (a plain call, a per-thread default stream).
struct StreamTag {
  uint64_t stream = 0;
  uint64_t context = 0;
  uint64_t epoch = 0;
  bool operator==(const StreamTag&) const = default;
};

// What the pool needs of the CUDA driver (the hook's real driver; a fake in unit tests).
// Every call may fail; the pool then answers "out of memory" and leaves nothing behind.
class PoolDriver {
 public:
  virtual ~PoolDriver() = default;
  virtual bool reserve(uint64_t bytes, uint64_t& base) = 0;
  virtual bool create(uint64_t bytes, uint64_t& handle) = 0;
  virtual int export_fd(uint64_t handle) = 0;  // a new descriptor, or -1
  virtual bool import_fd(int fd, uint64_t& handle) = 0;
  virtual bool map(uint64_t va, uint64_t bytes, uint64_t handle) = 0;  // map only (no access yet)
  virtual bool set_access(uint64_t va, uint64_t bytes) = 0;  // read-write, over a run of mappings
  virtual void unmap(uint64_t va, uint64_t bytes) = 0;
  virtual void release(uint64_t handle) = 0;
  // Zero-fill on the GPU (a memset queued on a stream of the pool's own); zero_wait() returns
  // when every queued fill is done. False when the fill cannot be queued or failed.
  virtual bool zero_async(uint64_t va, uint64_t bytes) = 0;
  virtual bool zero_wait() = 0;
  // Completion markers: an opaque marker behind the work queued on `stream` so far.
  virtual void* record(void* stream, bool per_thread) = 0;
  // The same, after the free (its marker was left for later): behind more work than the free
  // had queued, which is safe. nullptr when `tag` no longer names that stream (destroyed
  // since, or a legacy stream of another context than the current one).
  virtual void* record_later(void* stream, bool per_thread, const StreamTag&) { return record(stream, per_thread); }
  // A marker behind the work queued so far on every stream that could still touch a block
  // freed with plain cuMemFree; nullptr when they cannot all be named (then the block waits
  // for a device synchronization).
  virtual void* record_all() { return nullptr; }
  virtual bool done(void* marker) = 0;  // errors count as done: the work will never run
  virtual void recycle(void* marker) = 0;
  // Waits for all work of the process's context; false when it may not now (a stream capture
  // is open: a context's synchronization would invalidate it), and nothing is known finished.
  virtual bool synchronize() = 0;
};

// A chunk handed over by tandemd: its descriptor (the pool closes it) and id.
struct GrantedChunk {
  int fd = -1;
  uint64_t id = 0;
};

// The pool's side of the conversation with tandemd (the hook's daemon link; a fake in tests).
class PoolBroker {
 public:
  virtual ~PoolBroker() = default;
  virtual bool linked() = 0;
  // Chunks of `chunk_bytes` for up to `bytes`, possibly after other processes released them
  // (bounded wait). Fewer, or none, when tandemd has nothing to give.
  virtual std::vector<GrantedChunk> acquire(uint64_t bytes, uint64_t chunk_bytes) = 0;
  // tandemd keeps a duplicate of `fd` and names the chunk (0: not registered).
  virtual uint64_t register_chunk(int fd, uint64_t bytes) = 0;
  virtual void release(const std::vector<uint64_t>& ids) = 0;
};

struct PoolStats {
  uint64_t chunk_bytes = 0;
  uint64_t held_bytes = 0;      // chunks mapped in this process
  uint64_t live_bytes = 0;      // blocks the application holds (rounded sizes)
  uint64_t pending_bytes = 0;   // freed blocks waiting for the GPU
  uint64_t idle_bytes = 0;      // chunks with no live block (could leave once their frees finished)
  uint64_t chunks_created = 0;  // made here with cuMemCreate
  uint64_t chunks_received = 0; // handed over by tandemd (zero-filled here)
  uint64_t chunks_released = 0; // given back (to tandemd, or to the driver when unregistered)
  uint64_t syncs = 0;           // device synchronizations taken to reuse or release plainly freed blocks
  uint64_t driver_calls = 0;    // chunk-level driver calls (create/export/import/map/access/zero/unmap/release)
  uint64_t stream_reuses = 0;   // allocations served by a block freed on their stream, at once
  uint64_t handovers = 0;       // allocations that received chunks from tandemd
  uint64_t handover_ns_total = 0, handover_ns_max = 0;  // their time, request to usable
  uint64_t handover_ns_p50 = 0, handover_ns_p99 = 0;    // of the last kHandoverSamples (nearest rank)
  uint64_t zero_ns_total = 0;   // of which waiting for the zero-fill
};

class ChunkPool {
 public:
  static constexpr size_t kHandoverSamples = 256;  // handovers whose times the percentiles keep
  ChunkPool(PoolDriver& driver, PoolBroker& broker, uint64_t chunk_bytes, uint64_t va_bytes);
  ~ChunkPool();

  // Reserves the virtual range. False (with the reason) when the driver cannot.
  bool init(const char** why);

  // A block of `bytes`, or 0 when no memory can be had. `stream`: the stream of a
  // stream-ordered allocation (reuse in stream order).
  uint64_t allocate(uint64_t bytes, const StreamTag& stream = {});
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  bool owns(uint64_t ptr) const { return ptr >= base_ && ptr < base_ + va_bytes_; }
  // Frees the block at `ptr`; `bytes` gets its size as allocated. A stream-ordered free
  // waits for a marker on `stream` (or serves the next allocation tagged `tag` at once); a
  // plain one for a device synchronization. False when `ptr` is not a live block.
  bool free(uint64_t ptr, bool stream_ordered, void* stream, bool per_thread, uint64_t* bytes,
            const StreamTag& tag = {});
  // Gives idle chunks back until at most `target_bytes` are held; may synchronize the device
  // to finish pending frees. tandemd hears of the release before the chunks are unmapped here
  // (SIRIUS's deferred unmap: the receiver need not wait for it). Returns the bytes released.
  uint64_t trim(uint64_t target_bytes, bool may_synchronize);
  // Same, from a thread that must not wait for the chunk lock (the progress thread).
  uint64_t try_trim(uint64_t target_bytes, bool may_synchronize);

  PoolStats stats() const;
  // Held and live bytes, lock-free: the progress thread's look, every tick.
  void usage(uint64_t& held, uint64_t& live) const;
  // Chunks held with no live block in them, lock-free (what cuMemGetInfo counts as free).
  uint64_t idle_bytes() const;
  // The most bytes held and live at once since the pool began or reset_peaks() (the device
  // memory pool's "high" attributes, which frameworks read as their peak memory).
  void peaks(uint64_t& held_peak, uint64_t& live_peak) const;
  void reset_peaks(bool held, bool live);
  // The most bytes live at once since the previous call (or the start), and a new window from
  // the bytes live now: the progress thread's look at the working set.
  uint64_t take_window_peak();
  // Checks every chunk's sub-allocator and the slot table (tests, debug builds).
  bool check(const char** why) const;

  // Counts of the driver and tandemd calls so far (tests: the fast path makes none).
  uint64_t slow_calls() const { return slow_calls_.load(std::memory_order_relaxed); }

 private:
  // A slot's use word, shared by allocation and trimming: whether a chunk is mapped there,
  // whether trimming claimed it, and how many live blocks it holds (a run counts once per slot).
  static constexpr uint32_t kMapped = 1u << 31;
  static constexpr uint32_t kLeaving = 1u << 30;
  static constexpr uint32_t kCountMask = kLeaving - 1;

  enum class SlotState : uint8_t { unmapped, small, run };
  // The allocation lock's view of a slot.
  struct Slot {
    SlotState state = SlotState::unmapped;
    std::unique_ptr<RangeAllocator> blocks;  // small: its sub-allocator
    uint32_t run_head = 0;   // run: the first slot of the run
    uint64_t stamp = 0;      // which mapping this is (stamps only grow)
  };
  // What both locks share, per slot.
  struct SlotShared {
    std::atomic<uint32_t> use{0};
    std::atomic<uint64_t> last_free_seq{0};  // the latest free of a block in it
    uint64_t handle = 0;     // physical chunk (chunk lock)
    uint64_t daemon_id = 0;  // 0: not registered with tandemd (chunk lock)
  };
  struct Block {
    uint64_t bytes;  // as allocated (rounded)
    uint32_t slot;   // small: its chunk; run: the head
    uint32_t run;    // run: chunks in it (0: small)
    uint64_t stamp;  // the newest stamp of its slots when allocated
    uint64_t free_seq = 0;  // pending: the number of the free that made it so (its Pending's seq)
  };
  struct Pending {
    uint64_t ptr;
    void* marker;  // nullptr: waits for a device synchronization (or, unsealed, to be recorded)
    uint64_t seq;  // its free's number
    StreamTag tag;  // the stream of a stream-ordered free
    void* stream = nullptr;  // unsealed: where its marker goes (record_later)
    bool per_thread = false;
    bool unsealed = false;
  };

  uint64_t slot_va(uint32_t i) const { return base_ + uint64_t{i} * chunk_bytes_; }
  // Takes a place for one more live block in slot `i` unless it is unmapped or leaving.
  bool claim_block(uint32_t i);
  void unclaim_block(uint32_t i);
  // A place in each of `count` slots from `first`, won against trimming in all or in none.
  bool claim_blocks(uint32_t first, uint32_t count);
  // A small slot usable by the allocator: mapped, not leaving, and its sub-allocator current.
  bool small_usable(uint32_t i) const;
  // No live or pending block, mapped, not leaving (allocation lock).
  bool slot_empty(uint32_t i) const;
  // A block of exactly `bytes` freed on `tag`'s stream and still pending, live again; 0 when none.
  uint64_t reuse_on_stream(uint64_t bytes, const StreamTag& tag);
  // Records the markers left for later.
  void seal_pending();
  // A block in an existing chunk, or (grow) in a new one; 0 when none.
  uint64_t allocate_small(uint64_t bytes, bool grow);
  // A run of whole chunks in consecutive slots: idle mapped chunks, or (grow) new ones too.
  uint64_t allocate_run(uint64_t bytes, bool grow);
  // Maps fresh chunks into the given unmapped slots (allocation and chunk locks); all or none.
  bool fill_slots_locked(const std::vector<uint32_t>& slots);
  // After map: read-write access and (received chunks) zero-fill, one call each per run.
  bool open_runs(const std::vector<uint32_t>& slots, const std::vector<bool>& zero);
  void unmap_chunk(uint32_t slot);
  void mark_mapped(uint32_t slot);
  // Finishes pending frees whose markers completed (all of them after a synchronization).
  void reap(bool synchronize);
  // The pending block at `ptr` freed by free number `seq` becomes free; nothing when the block
  // pending there now is another one.
  void finish_free(uint64_t ptr, uint64_t seq);
  void synchronize_device();
  uint64_t trim_locked(uint64_t target_bytes, bool may_synchronize);
  template <typename Try>
  uint64_t with_reuse(Try&& attempt);

  PoolDriver& driver_;
  PoolBroker& broker_;
  const uint64_t chunk_bytes_;
  const uint64_t va_bytes_;
  uint64_t base_ = 0;
  uint32_t slot_count_ = 0;

  mutable std::mutex alloc_mutex_;  // application threads
  std::vector<Slot> slots_;
  std::vector<uint32_t> small_slots_;  // slots mapped as single chunks (stale ones dropped lazily)
  uint32_t hint_ = UINT32_MAX;         // the small slot that served last
  uint64_t next_stamp_ = 1;
  std::map<uint64_t, Block> blocks_;  // live, by address
  std::vector<Pending> pending_;
  std::map<uint64_t, Block> pending_blocks_;  // freed, by address
  size_t unsealed_ = 0;  // pending frees whose markers are not recorded yet

  mutable std::mutex chunk_mutex_;  // growth and trimming
  std::unique_ptr<SlotShared[]> shared_;

  // Frees are numbered; every free up to synced_seq_ is known finished on the GPU.
  std::atomic<uint64_t> free_seq_{0}, synced_seq_{0};
  std::atomic<uint64_t> held_bytes_{0}, live_bytes_{0}, pending_bytes_{0};
  std::atomic<uint64_t> held_peak_{0}, live_peak_{0}, window_peak_{0};
  // `bytes` more live, and the high-water marks raised.
  void add_live(uint64_t bytes) {
    uint64_t live = live_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_peak(live_peak_, live);
    raise_peak(window_peak_, live);
  }
  // A high-water mark: one relaxed load on the allocation path unless `now` is a new peak.
  static void raise_peak(std::atomic<uint64_t>& peak, uint64_t now) {
    for (uint64_t seen = peak.load(std::memory_order_relaxed);
         now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed);) {
    }
  }
  std::atomic<uint64_t> slow_calls_{0};
  // Counters of the chunk lock's work, read by stats() without it.
  std::atomic<uint64_t> chunks_created_{0}, chunks_received_{0}, chunks_released_{0}, syncs_{0},
      driver_calls_{0}, stream_reuses_{0}, handovers_{0}, handover_ns_total_{0}, handover_ns_max_{0}, zero_ns_total_{0};
  std::atomic<uint64_t> handover_ns_recent_[kHandoverSamples] = {};  // a ring, by handover number
};

}  // namespace tandem::memory
