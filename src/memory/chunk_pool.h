// A process's share of the node's GPU memory pool (DESIGN §6; SIRIUS §5, HARLI §4, Zico §6).
// Physical memory comes in chunks (cuMemCreate with POSIX fd handles, TANDEM_MEM_CHUNK each),
// mapped into one virtual range reserved at start, a chunk per slot of that range:
//   * a block of at most a chunk is sub-allocated inside a chunk (RangeAllocator);
//   * a larger one gets a run of whole chunks in consecutive slots (contiguous addresses,
//     separate physical chunks).
// Chunks come from tandemd (chunks other processes released: zero-filled here before use, as
// they change owner) or are created here and registered with tandemd, which keeps their fds.
// A freed block is reusable only after the GPU finished the work queued before the free:
// stream-ordered frees wait for a marker on their stream, plain frees (cuMemFree, which the
// driver itself synchronizes) for a device synchronization, taken once for all of them when
// their memory is needed. A chunk leaves the process (trim) only when nothing in it is live
// or pending. All of it behind one mutex: allocations are not on the launch path.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "range_allocator.h"

namespace tandem::memory {

// What the pool needs of the CUDA driver (the hook's real driver; a fake in unit tests).
// Every call may fail; the pool then answers "out of memory" and leaves nothing behind.
class PoolDriver {
 public:
  virtual ~PoolDriver() = default;
  virtual bool reserve(uint64_t bytes, uint64_t& base) = 0;
  virtual bool create(uint64_t bytes, uint64_t& handle) = 0;
  virtual int export_fd(uint64_t handle) = 0;  // a new descriptor, or -1
  virtual bool import_fd(int fd, uint64_t& handle) = 0;
  virtual bool map(uint64_t va, uint64_t bytes, uint64_t handle) = 0;  // map and make read-write
  virtual void unmap(uint64_t va, uint64_t bytes) = 0;
  virtual void release(uint64_t handle) = 0;
  virtual bool zero(uint64_t va, uint64_t bytes) = 0;  // done when it returns
  // Completion markers: an opaque marker behind the work queued on `stream` so far.
  virtual void* record(void* stream, bool per_thread) = 0;
  virtual bool done(void* marker) = 0;  // errors count as done: the work will never run
  virtual void recycle(void* marker) = 0;
  virtual void synchronize() = 0;  // all work of the process's context
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
  uint64_t idle_bytes = 0;      // chunks with nothing live or pending (could leave now)
  uint64_t chunks_created = 0;  // made here with cuMemCreate
  uint64_t chunks_received = 0; // handed over by tandemd (zero-filled here)
  uint64_t chunks_released = 0; // given back (to tandemd, or to the driver when unregistered)
  uint64_t syncs = 0;           // device synchronizations taken to reuse plainly freed blocks
  uint64_t driver_calls = 0;    // chunk-level driver calls (create/export/import/map/unmap/zero/release)
};

class ChunkPool {
 public:
  ChunkPool(PoolDriver& driver, PoolBroker& broker, uint64_t chunk_bytes, uint64_t va_bytes);
  ~ChunkPool();

  // Reserves the virtual range. False (with the reason) when the driver cannot.
  bool init(const char** why);

  // A block of `bytes`, or 0 when no memory can be had.
  uint64_t allocate(uint64_t bytes);
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  bool owns(uint64_t ptr) const { return ptr >= base_ && ptr < base_ + va_bytes_; }
  // Frees the block at `ptr`; `bytes` gets its size as allocated. A stream-ordered free
  // waits for a marker on `stream`; a plain one for a device synchronization. False when
  // `ptr` is not a live block.
  bool free(uint64_t ptr, bool stream_ordered, void* stream, bool per_thread, uint64_t* bytes);
  // Gives idle chunks back until at most `target_bytes` are held; may synchronize the device
  // to finish pending frees. Returns the bytes released.
  uint64_t trim(uint64_t target_bytes, bool may_synchronize);
  // Same, from a thread that must not wait for the pool's lock (the progress thread).
  uint64_t try_trim(uint64_t target_bytes, bool may_synchronize);

  PoolStats stats() const;
  // Held and live bytes without waiting for the lock (false when it is held): the progress
  // thread's look, every tick.
  bool try_usage(uint64_t& held, uint64_t& live) const;
  uint64_t chunks_received() const;
  // Checks every chunk's sub-allocator and the slot table (tests, debug builds).
  bool check(const char** why) const;

 private:
  enum class SlotState : uint8_t { unmapped, small, run };
  struct Slot {
    SlotState state = SlotState::unmapped;
    uint64_t handle = 0;     // physical chunk
    uint64_t daemon_id = 0;  // 0: not registered with tandemd
    std::unique_ptr<RangeAllocator> blocks;  // small: its sub-allocator
    uint32_t live = 0;       // blocks allocated and not freed (a run counts once, at its head)
    uint32_t pending = 0;    // freed blocks the GPU may still use
    uint32_t run_head = 0;   // run: the first slot of the run
  };
  struct Block {
    uint64_t bytes;  // as allocated (rounded)
    uint32_t slot;   // small: its chunk; run: the head
    uint32_t run;    // run: chunks in it (0: small)
  };
  struct Pending {
    uint64_t ptr;
    void* marker;  // nullptr: waits for a device synchronization
  };

  uint64_t slot_va(uint32_t i) const { return base_ + uint64_t{i} * chunk_bytes_; }
  bool slot_idle(uint32_t i) const;
  uint64_t idle_bytes_locked() const;
  // A block in an existing chunk, or (grow) in a new one; 0 when none.
  uint64_t allocate_small(uint64_t bytes, bool grow);
  // A run of whole chunks in consecutive slots: idle mapped chunks, or (grow) new ones too.
  uint64_t allocate_run(uint64_t bytes, bool grow);
  // Maps fresh chunks into the given unmapped slots; all or none.
  bool fill_slots(const std::vector<uint32_t>& slots);
  bool map_chunk(uint32_t slot, uint64_t handle, uint64_t daemon_id, bool zero);
  void unmap_chunk(uint32_t slot, std::vector<uint64_t>& released_ids);
  // Finishes pending frees whose markers completed (all of them after a synchronization).
  void reap(bool synchronize);
  void finish_free(uint64_t ptr);
  uint64_t trim_locked(uint64_t target_bytes, bool may_synchronize);
  template <typename Try>
  uint64_t with_reuse(Try&& attempt);

  PoolDriver& driver_;
  PoolBroker& broker_;
  const uint64_t chunk_bytes_;
  const uint64_t va_bytes_;
  uint64_t base_ = 0;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;
  std::map<uint64_t, Block> blocks_;  // live, by address
  std::vector<Pending> pending_;
  std::map<uint64_t, Block> pending_blocks_;  // freed, by address
  PoolStats stats_;
};

}  // namespace tandem::memory
