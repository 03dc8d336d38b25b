#include "chunk_pool.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>

namespace tandem::memory {

namespace {
uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void raise_to(std::atomic<uint64_t>& word, uint64_t value) {
  uint64_t old = word.load(std::memory_order_relaxed);
  while (value > old && !word.compare_exchange_weak(old, value, std::memory_order_acq_rel)) {
  }
}
}  // namespace

ChunkPool::ChunkPool(PoolDriver& driver, PoolBroker& broker, uint64_t chunk_bytes, uint64_t va_bytes)
    : driver_(driver), broker_(broker), chunk_bytes_(chunk_bytes),
      va_bytes_(chunk_bytes ? va_bytes / chunk_bytes * chunk_bytes : 0) {}

ChunkPool::~ChunkPool() {
  for (Pending& p : pending_)
    if (p.marker) driver_.recycle(p.marker);
}

bool ChunkPool::init(const char** why) {
  if (!chunk_bytes_ || !va_bytes_) return *why = "chunk or range size is zero", false;
  if (!driver_.reserve(va_bytes_, base_)) return *why = "cannot reserve a virtual address range", false;
  slot_count_ = static_cast<uint32_t>(va_bytes_ / chunk_bytes_);
  slots_.resize(slot_count_);
  shared_ = std::make_unique<SlotShared[]>(slot_count_);
  return true;
}

bool ChunkPool::claim_block(uint32_t i) {
  std::atomic<uint32_t>& use = shared_[i].use;
  uint32_t v = use.load(std::memory_order_acquire);
  do {
    if (!(v & kMapped) || (v & kLeaving)) return false;
  } while (!use.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel));
  return true;
}

void ChunkPool::unclaim_block(uint32_t i) { shared_[i].use.fetch_sub(1, std::memory_order_release); }

bool ChunkPool::claim_blocks(uint32_t first, uint32_t count) {
  for (uint32_t i = first; i < first + count; ++i) {
    if (claim_block(i)) continue;
    while (i-- > first) unclaim_block(i);
    return false;
  }
  return true;
}

bool ChunkPool::small_usable(uint32_t i) const {
  uint32_t v = shared_[i].use.load(std::memory_order_acquire);
  return slots_[i].state == SlotState::small && (v & kMapped) && !(v & kLeaving);
}

bool ChunkPool::slot_empty(uint32_t i) const {
  return slots_[i].state == SlotState::small && slots_[i].blocks->empty() &&
         shared_[i].use.load(std::memory_order_acquire) == kMapped;
}

// Reuse before growth: what is free now (the fast path), then what the GPU has finished with,
// then (when the pending frees could hold the block) what a synchronization frees; only then
// new chunks, and as a last resort a synchronization after all.
template <typename Try>
uint64_t ChunkPool::with_reuse(Try&& attempt) {
  if (uint64_t p = attempt(false)) return p;
  if (pending_.empty()) return attempt(true);
  reap(false);
  if (uint64_t p = attempt(false)) return p;
  bool waits_for_sync = std::any_of(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.marker; });
  if (waits_for_sync && pending_bytes_.load(std::memory_order_relaxed) >= chunk_bytes_ / 2) {
    reap(true);
    if (uint64_t p = attempt(false)) return p;
  }
  if (uint64_t p = attempt(true)) return p;
  if (!pending_.empty()) {
    reap(true);
    if (uint64_t p = attempt(false)) return p;
  }
  // No memory to grow with, and the idle chunks held cannot take the block (a run needs
  // consecutive slots, and idle chunks sit where earlier blocks were): they go back (to tandemd,
  // or the driver) and come again where the block needs them. Without this a full GPU failed an
  // allocation its own idle memory could hold (PyTorch's caching allocator, retrying a large
  // block after freeing its cache, ran out of memory).
  if (!idle_bytes()) return 0;
  {
    std::lock_guard<std::mutex> chunks(chunk_mutex_);
    trim_locked(0, true);
  }
  return attempt(true);
}

uint64_t ChunkPool::allocate(uint64_t bytes, const StreamTag& stream) {
  std::lock_guard<std::mutex> lock(alloc_mutex_);
  if (!slot_count_) return 0;
  uint64_t want = RangeAllocator::rounded(bytes ? bytes : 1);
  if (stream.stream)
    if (uint64_t p = reuse_on_stream(want, stream)) return p;
  seal_pending();
  if (want <= chunk_bytes_) return with_reuse([&](bool grow) { return allocate_small(want, grow); });
  return with_reuse([&](bool grow) { return allocate_run(want, grow); });
}

// The newest pending frees first (a step frees its activations in the reverse order of their
// allocation, and the next step allocates them again from the first). Only blocks whose chunks
// are still this mapping: trimming may have given one away since (its slot's stamp changed, or
// its use word is no longer mapped).
uint64_t ChunkPool::reuse_on_stream(uint64_t bytes, const StreamTag& tag) {
  constexpr size_t kLookBack = 64;  // bounds the search on the allocation path
  for (size_t k = pending_.size(), seen = 0; k-- > 0 && seen < kLookBack; ++seen) {
    Pending& p = pending_[k];
    if (!(p.tag == tag)) continue;
    auto it = pending_blocks_.find(p.ptr);
    if (it == pending_blocks_.end() || it->second.bytes != bytes || it->second.free_seq != p.seq) continue;
    const Block& b = it->second;
    const uint32_t slots = std::max<uint32_t>(b.run, 1);
    auto current = [&](uint32_t i) {
      const Slot& s = slots_[i];
      return b.run ? s.state == SlotState::run && s.run_head == b.slot && s.stamp <= b.stamp
                   : s.state == SlotState::small && s.stamp == b.stamp;
    };
    bool all_current = true;
    for (uint32_t i = b.slot; i < b.slot + slots && all_current; ++i) all_current = current(i);
    if (!all_current || !claim_blocks(b.slot, slots)) continue;
    if (p.marker) driver_.recycle(p.marker);
    unsealed_ -= p.unsealed;
    uint64_t ptr = p.ptr;
    auto node = pending_blocks_.extract(it);
    blocks_.insert(std::move(node));
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
    pending_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    add_live(bytes);
    stream_reuses_.fetch_add(1, std::memory_order_relaxed);
    return ptr;
  }
  return 0;
}

void ChunkPool::seal_pending() {
  for (size_t k = pending_.size(); unsealed_ && k-- > 0;) {
    Pending& p = pending_[k];
    if (!p.unsealed) continue;
    p.marker = driver_.record_later(p.stream, p.per_thread, p.tag);
    p.unsealed = false;
    --unsealed_;
  }
}

uint64_t ChunkPool::allocate_small(uint64_t bytes, bool grow) {
  auto place = [&](uint32_t i) -> uint64_t {
    Slot& s = slots_[i];
    if (!small_usable(i) || s.blocks->largest_free() < bytes || !claim_block(i)) return 0;
    uint64_t offset = s.blocks->allocate(bytes);
    if (offset == RangeAllocator::kNone) return unclaim_block(i), 0;
    uint64_t ptr = slot_va(i) + offset;
    blocks_[ptr] = Block{bytes, i, 0, s.stamp};
    add_live(bytes);
    hint_ = i;
    return ptr;
  };
  if (hint_ < slot_count_)
    if (uint64_t p = place(hint_)) return p;
  for (size_t k = 0; k < small_slots_.size();) {
    uint32_t i = small_slots_[k];
    if (slots_[i].state != SlotState::small || !(shared_[i].use.load(std::memory_order_acquire) & kMapped)) {
      small_slots_[k] = small_slots_.back();  // released or part of a run now
      small_slots_.pop_back();
      continue;
    }
    if (uint64_t p = place(i)) return p;
    ++k;
  }
  if (!grow) return 0;
  uint32_t target = UINT32_MAX;
  {
    std::lock_guard<std::mutex> chunks(chunk_mutex_);
    // A new chunk, from the top of the range: runs take the bottom, so they stay contiguous.
    for (uint32_t i = slot_count_; i-- > 0;)
      if (shared_[i].use.load(std::memory_order_acquire) == 0) {
        if (fill_slots_locked({i})) target = i;
        break;
      }
  }
  return target == UINT32_MAX ? 0 : place(target);
}

uint64_t ChunkPool::allocate_run(uint64_t bytes, bool grow) {
  const uint32_t n = static_cast<uint32_t>((bytes + chunk_bytes_ - 1) / chunk_bytes_);
  std::unique_lock<std::mutex> chunks(chunk_mutex_, std::defer_lock);
  if (grow) chunks.lock();  // the unmapped slots stay unmapped while this looks
  auto usable = [&](uint32_t i) {
    return slot_empty(i) || (grow && shared_[i].use.load(std::memory_order_acquire) == 0);
  };
  uint32_t start = 0, length = 0;
  for (uint32_t i = 0; i < slot_count_ && length < n; ++i) {
    if (usable(i)) {
      if (length++ == 0) start = i;
    } else {
      length = 0;
    }
  }
  if (length < n) return 0;
  std::vector<uint32_t> fresh;
  for (uint32_t i = start; i < start + n; ++i)
    if (shared_[i].use.load(std::memory_order_acquire) == 0) fresh.push_back(i);
  if (!fresh.empty() && !fill_slots_locked(fresh)) return 0;
  if (!claim_blocks(start, n)) return 0;
  uint64_t stamp = 0;
  for (uint32_t i = start; i < start + n; ++i) {
    slots_[i].state = SlotState::run;
    slots_[i].blocks.reset();
    slots_[i].run_head = start;
    stamp = std::max(stamp, slots_[i].stamp);
  }
  uint64_t ptr = slot_va(start);
  blocks_[ptr] = Block{bytes, start, n, stamp};
  add_live(bytes);
  return ptr;
}

void ChunkPool::mark_mapped(uint32_t i) {
  Slot& s = slots_[i];
  s.state = SlotState::small;
  s.blocks = std::make_unique<RangeAllocator>(chunk_bytes_);
  s.run_head = 0;
  s.stamp = next_stamp_++;
  if (std::find(small_slots_.begin(), small_slots_.end(), i) == small_slots_.end()) small_slots_.push_back(i);
  shared_[i].last_free_seq.store(0, std::memory_order_relaxed);
  shared_[i].use.store(kMapped, std::memory_order_release);
  raise_peak(held_peak_, held_bytes_.fetch_add(chunk_bytes_, std::memory_order_relaxed) + chunk_bytes_);
}

// Read-write access once per contiguous run of the new mappings, then one memset per run of
// received chunks, all on the pool's stream, and one wait for them all.
bool ChunkPool::open_runs(const std::vector<uint32_t>& slots, const std::vector<bool>& zero) {
  auto runs = [&](auto&& member, auto&& each) {
    for (size_t a = 0; a < slots.size();) {
      if (!member(a)) {
        ++a;
        continue;
      }
      size_t b = a + 1;
      while (b < slots.size() && member(b) && slots[b] == slots[b - 1] + 1) ++b;
      driver_calls_.fetch_add(1, std::memory_order_relaxed);
      if (!each(slot_va(slots[a]), (b - a) * chunk_bytes_)) return false;
      a = b;
    }
    return true;
  };
  if (!runs([](size_t) { return true; }, [&](uint64_t va, uint64_t len) { return driver_.set_access(va, len); }))
    return false;
  if (std::find(zero.begin(), zero.end(), true) == zero.end()) return true;
  uint64_t start = now_ns();
  bool ok = runs([&](size_t k) { return zero[k]; }, [&](uint64_t va, uint64_t len) { return driver_.zero_async(va, len); });
  ok = driver_.zero_wait() && ok;
  zero_ns_total_.fetch_add(now_ns() - start, std::memory_order_relaxed);
  return ok;
}

// Chunks from tandemd first (other processes' released memory: zero-filled here, since it
// changes owner), then new ones made here and registered with tandemd.
bool ChunkPool::fill_slots_locked(const std::vector<uint32_t>& slots) {
  const uint64_t start = now_ns();
  slow_calls_.fetch_add(1, std::memory_order_relaxed);
  std::vector<uint64_t> handles, ids;
  std::vector<bool> zero;
  std::vector<uint64_t> give_back;
  if (broker_.linked()) {
    for (const GrantedChunk& g : broker_.acquire(slots.size() * chunk_bytes_, chunk_bytes_)) {
      uint64_t handle = 0;
      bool imported = handles.size() < slots.size() && driver_.import_fd(g.fd, handle);
      driver_calls_.fetch_add(1, std::memory_order_relaxed);
      close(g.fd);
      if (imported && (driver_calls_.fetch_add(1, std::memory_order_relaxed),
                       driver_.map(slot_va(slots[handles.size()]), chunk_bytes_, handle))) {
        handles.push_back(handle);
        ids.push_back(g.id);
        zero.push_back(true);
      } else {
        if (imported) driver_.release(handle);
        give_back.push_back(g.id);  // not usable here: back to the pool
      }
    }
  }
  const size_t received = handles.size();
  bool ok = true;
  while (ok && handles.size() < slots.size()) {
    uint64_t handle = 0;
    driver_calls_.fetch_add(2, std::memory_order_relaxed);
    ok = driver_.create(chunk_bytes_, handle);
    if (ok && !driver_.map(slot_va(slots[handles.size()]), chunk_bytes_, handle)) {
      driver_.release(handle);
      ok = false;
    }
    if (ok) {
      handles.push_back(handle);
      ids.push_back(0);
      zero.push_back(false);
    }
  }
  if (ok) ok = open_runs(slots, zero);
  if (!ok) {  // all or none: what was mapped for this request goes back
    for (size_t k = 0; k < handles.size(); ++k) {
      driver_.unmap(slot_va(slots[k]), chunk_bytes_);
      driver_.release(handles[k]);
      if (ids[k]) give_back.push_back(ids[k]);
    }
  } else {
    for (size_t k = 0; k < handles.size(); ++k) {
      SlotShared& sh = shared_[slots[k]];
      sh.handle = handles[k];
      sh.daemon_id = ids[k];
      if (k >= received && broker_.linked()) {
        int fd = driver_.export_fd(handles[k]);
        driver_calls_.fetch_add(1, std::memory_order_relaxed);
        if (fd >= 0) {
          sh.daemon_id = broker_.register_chunk(fd, chunk_bytes_);
          close(fd);
        }
      }
      mark_mapped(slots[k]);
    }
    chunks_received_.fetch_add(received, std::memory_order_relaxed);
    chunks_created_.fetch_add(handles.size() - received, std::memory_order_relaxed);
  }
  if (!give_back.empty()) broker_.release(give_back);
  if (ok && received) {  // memory that changed owner: request to usable
    uint64_t took = now_ns() - start;
    uint64_t number = handovers_.fetch_add(1, std::memory_order_relaxed);
    handover_ns_recent_[number % kHandoverSamples].store(took, std::memory_order_relaxed);
    handover_ns_total_.fetch_add(took, std::memory_order_relaxed);
    raise_to(handover_ns_max_, took);
  }
  return ok;
}

void ChunkPool::unmap_chunk(uint32_t slot) {
  SlotShared& sh = shared_[slot];
  driver_.unmap(slot_va(slot), chunk_bytes_);
  driver_.release(sh.handle);  // tandemd's descriptor keeps a registered chunk alive
  driver_calls_.fetch_add(2, std::memory_order_relaxed);
  sh.handle = sh.daemon_id = 0;
  sh.use.store(0, std::memory_order_release);
  chunks_released_.fetch_add(1, std::memory_order_relaxed);
}

bool ChunkPool::free(uint64_t ptr, bool stream_ordered, void* stream, bool per_thread, uint64_t* bytes,
                     const StreamTag& tag) {
  std::lock_guard<std::mutex> lock(alloc_mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return false;
  auto node = blocks_.extract(it);  // the map's node moves to pending_blocks_: no allocation
  Block b = node.mapped();
  if (bytes) *bytes = b.bytes;
  // A marker that cannot be recorded (a stream being captured) waits for a synchronization.
  // A free on a stream that can be named leaves its marker for later (seal_pending): the
  // stream's next allocation of its size usually takes the block back first.
  bool later = stream_ordered && tag.stream;
  void* marker = later ? nullptr : stream_ordered ? driver_.record(stream, per_thread) : driver_.record_all();
  uint64_t seq = free_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  pending_.push_back(Pending{ptr, marker, seq, stream_ordered ? tag : StreamTag{}, stream, per_thread, later});
  unsealed_ += later;
  // A block still pending at this address belongs to an earlier mapping: its free was not reaped
  // when the progress thread's trim gave its chunk away and growth mapped a chunk there again.
  // Its memory left with that chunk; only its record goes (its Pending no longer matches, by
  // number). Before, this block's record was dropped instead: its range never became free in
  // the chunk, and pending_bytes only grew (10 GB in 300 steps of two PyTorch jobs under Zico).
  if (auto stale = pending_blocks_.find(ptr); stale != pending_blocks_.end()) {
    pending_bytes_.fetch_sub(stale->second.bytes, std::memory_order_relaxed);
    pending_blocks_.erase(stale);
  }
  node.mapped().free_seq = seq;
  pending_blocks_.insert(std::move(node));
  // The free's number first, then the use: trimming that sees the chunk unused sees the number.
  for (uint32_t i = b.slot; i < b.slot + std::max<uint32_t>(b.run, 1); ++i) {
    shared_[i].last_free_seq.store(seq, std::memory_order_relaxed);
    unclaim_block(i);
  }
  live_bytes_.fetch_sub(b.bytes, std::memory_order_relaxed);
  pending_bytes_.fetch_add(b.bytes, std::memory_order_relaxed);
  return true;
}

void ChunkPool::synchronize_device() {
  uint64_t covered = free_seq_.load(std::memory_order_acquire);  // frees made before the synchronization
  if (!driver_.synchronize()) return;
  syncs_.fetch_add(1, std::memory_order_relaxed);
  slow_calls_.fetch_add(1, std::memory_order_relaxed);
  raise_to(synced_seq_, covered);
}

void ChunkPool::reap(bool synchronize) {
  if (pending_.empty()) return;
  if (synchronize) synchronize_device();
  auto finished = [&](Pending& p) {
    bool done = p.seq <= synced_seq_.load(std::memory_order_acquire) || (p.marker && driver_.done(p.marker));
    if (!done) return false;
    if (p.marker) driver_.recycle(p.marker);
    unsealed_ -= p.unsealed;  // finished by a synchronization before its marker was needed
    finish_free(p.ptr, p.seq);
    return true;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), finished), pending_.end());
  // Every free before the oldest one still pending is finished: trimming may take its chunks.
  raise_to(synced_seq_, pending_.empty() ? free_seq_.load(std::memory_order_relaxed) : pending_.front().seq - 1);
}

// The block's memory becomes free in its sub-allocator, unless trimming gave its chunk away
// meanwhile (then the slot was reset, or will be when a chunk is mapped there again).
void ChunkPool::finish_free(uint64_t ptr, uint64_t seq) {
  auto it = pending_blocks_.find(ptr);
  if (it == pending_blocks_.end() || it->second.free_seq != seq) return;
  Block b = it->second;
  pending_blocks_.erase(it);
  pending_bytes_.fetch_sub(b.bytes, std::memory_order_relaxed);
  if (!b.run) {
    Slot& s = slots_[b.slot];
    if (s.state == SlotState::small && s.stamp == b.stamp) s.blocks->free(ptr - slot_va(b.slot));
    return;
  }
  for (uint32_t i = b.slot; i < b.slot + b.run; ++i) {  // the run's chunks become single chunks
    Slot& s = slots_[i];
    if (s.state != SlotState::run || s.run_head != b.slot || s.stamp > b.stamp) continue;
    s.state = SlotState::small;
    s.blocks = std::make_unique<RangeAllocator>(chunk_bytes_);
    s.run_head = 0;
    if (std::find(small_slots_.begin(), small_slots_.end(), i) == small_slots_.end()) small_slots_.push_back(i);
  }
}

// Claims idle chunks from the top (an allocation can no longer place a block in them), tells
// tandemd first, and only then unmaps them: the receiver need not wait for the unmapping.
uint64_t ChunkPool::trim_locked(uint64_t target_bytes, bool may_synchronize) {
  if (held_bytes_.load(std::memory_order_relaxed) <= target_bytes) return 0;
  bool unfinished = false;
  for (uint32_t i = 0; i < slot_count_ && !unfinished; ++i)
    unfinished = shared_[i].use.load(std::memory_order_acquire) == kMapped &&
                 shared_[i].last_free_seq.load(std::memory_order_relaxed) > synced_seq_.load(std::memory_order_relaxed);
  if (unfinished && may_synchronize) synchronize_device();
  std::vector<uint32_t> leaving;
  std::vector<uint64_t> ids;
  uint64_t released = 0;
  for (uint32_t i = slot_count_; i-- > 0 && held_bytes_.load(std::memory_order_relaxed) > target_bytes;) {
    uint32_t idle = kMapped;
    if (!shared_[i].use.compare_exchange_strong(idle, kMapped | kLeaving, std::memory_order_acq_rel)) continue;
    if (shared_[i].last_free_seq.load(std::memory_order_relaxed) > synced_seq_.load(std::memory_order_acquire)) {
      shared_[i].use.store(kMapped, std::memory_order_release);  // the GPU may still write it
      continue;
    }
    leaving.push_back(i);
    if (shared_[i].daemon_id) ids.push_back(shared_[i].daemon_id);
    held_bytes_.fetch_sub(chunk_bytes_, std::memory_order_relaxed);
    released += chunk_bytes_;
  }
  if (leaving.empty()) return 0;
  slow_calls_.fetch_add(1, std::memory_order_relaxed);
  if (!ids.empty()) broker_.release(ids);
  for (uint32_t i : leaving) unmap_chunk(i);
  return released;
}

uint64_t ChunkPool::trim(uint64_t target_bytes, bool may_synchronize) {
  std::lock_guard<std::mutex> lock(chunk_mutex_);
  return trim_locked(target_bytes, may_synchronize);
}

uint64_t ChunkPool::try_trim(uint64_t target_bytes, bool may_synchronize) {
  std::unique_lock<std::mutex> lock(chunk_mutex_, std::try_to_lock);
  return lock.owns_lock() ? trim_locked(target_bytes, may_synchronize) : 0;
}

uint64_t ChunkPool::idle_bytes() const {
  uint64_t idle = 0;
  for (uint32_t i = 0; i < slot_count_; ++i)
    idle += shared_[i].use.load(std::memory_order_relaxed) == kMapped ? chunk_bytes_ : 0;
  return idle;
}

void ChunkPool::peaks(uint64_t& held_peak, uint64_t& live_peak) const {
  held_peak = held_peak_.load(std::memory_order_relaxed);
  live_peak = live_peak_.load(std::memory_order_relaxed);
}

void ChunkPool::reset_peaks(bool held, bool live) {
  if (held) held_peak_.store(held_bytes_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (live) live_peak_.store(live_bytes_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

uint64_t ChunkPool::take_window_peak() {
  return window_peak_.exchange(live_bytes_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void ChunkPool::usage(uint64_t& held, uint64_t& live) const {
  held = held_bytes_.load(std::memory_order_relaxed);
  live = live_bytes_.load(std::memory_order_relaxed);
}

PoolStats ChunkPool::stats() const {
  PoolStats s;
  s.chunk_bytes = chunk_bytes_;
  s.held_bytes = held_bytes_.load();
  s.live_bytes = live_bytes_.load();
  s.pending_bytes = pending_bytes_.load();
  s.idle_bytes = idle_bytes();
  s.chunks_created = chunks_created_.load();
  s.chunks_received = chunks_received_.load();
  s.chunks_released = chunks_released_.load();
  s.syncs = syncs_.load();
  s.driver_calls = driver_calls_.load();
  s.stream_reuses = stream_reuses_.load();
  s.handovers = handovers_.load();
  s.handover_ns_total = handover_ns_total_.load();
  s.handover_ns_max = handover_ns_max_.load();
  s.zero_ns_total = zero_ns_total_.load();
  std::array<uint64_t, kHandoverSamples> recent;  // on the stack: stats() allocates nothing
  const size_t n = std::min<uint64_t>(s.handovers, kHandoverSamples);
  for (size_t i = 0; i < n; ++i) recent[i] = handover_ns_recent_[i].load(std::memory_order_relaxed);
  if (n) {
    std::sort(recent.begin(), recent.begin() + static_cast<long>(n));
    auto nearest_rank = [&](size_t percent) { return recent[(n * percent + 99) / 100 - 1]; };
    s.handover_ns_p50 = nearest_rank(50);
    s.handover_ns_p99 = nearest_rank(99);
  }
  return s;
}

bool ChunkPool::check(const char** why) const {
  std::lock_guard<std::mutex> lock(alloc_mutex_);
  std::lock_guard<std::mutex> chunks(chunk_mutex_);
  uint64_t held = 0;
  for (uint32_t i = 0; i < slot_count_; ++i) {
    uint32_t use = shared_[i].use.load();
    if (!(use & kMapped)) continue;
    if (use & kLeaving) return *why = "a slot left claimed by trimming", false;
    held += chunk_bytes_;
    const Slot& s = slots_[i];
    if (s.state == SlotState::small && (!s.blocks || !s.blocks->check(why))) return false;
    if (s.state == SlotState::run && slots_[s.run_head].state != SlotState::run)
      return *why = "a run slot whose head is not part of a run", false;
  }
  if (held != held_bytes_.load()) return *why = "held bytes do not match the mapped slots", false;
  uint64_t live_per_slot = 0;
  for (const auto& [ptr, b] : blocks_) {
    if (pending_blocks_.count(ptr)) return *why = "a block both live and pending", false;
    live_per_slot += std::max<uint32_t>(b.run, 1);
  }
  uint64_t counted = 0;
  for (uint32_t i = 0; i < slot_count_; ++i) counted += shared_[i].use.load() & kCountMask;
  if (counted != live_per_slot) return *why = "slot use counts do not match the live blocks", false;
  return true;
}

}  // namespace tandem::memory
