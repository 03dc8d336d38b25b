#include "chunk_pool.h"

#include <unistd.h>

#include <algorithm>

namespace tandem::memory {

ChunkPool::ChunkPool(PoolDriver& driver, PoolBroker& broker, uint64_t chunk_bytes, uint64_t va_bytes)
    : driver_(driver), broker_(broker), chunk_bytes_(chunk_bytes),
      va_bytes_(chunk_bytes ? va_bytes / chunk_bytes * chunk_bytes : 0) {
  stats_.chunk_bytes = chunk_bytes_;
}

ChunkPool::~ChunkPool() {
  for (Pending& p : pending_)
    if (p.marker) driver_.recycle(p.marker);
}

bool ChunkPool::init(const char** why) {
  if (!chunk_bytes_ || !va_bytes_) return *why = "chunk or range size is zero", false;
  if (!driver_.reserve(va_bytes_, base_)) return *why = "cannot reserve a virtual address range", false;
  slots_.resize(va_bytes_ / chunk_bytes_);
  return true;
}

bool ChunkPool::slot_idle(uint32_t i) const {
  const Slot& s = slots_[i];
  return s.state == SlotState::small && s.live == 0 && s.pending == 0 && s.blocks->empty();
}

uint64_t ChunkPool::idle_bytes_locked() const {
  uint64_t idle = 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) idle += slot_idle(i) ? chunk_bytes_ : 0;
  return idle;
}

// Reuse before growth: what is free now, then what the GPU has finished with, then (when the
// pending frees could hold the block) what a synchronization frees; only then new chunks,
// and as a last resort a synchronization after all.
template <typename Try>
uint64_t ChunkPool::with_reuse(Try&& attempt) {
  if (uint64_t p = attempt(false)) return p;
  if (pending_.empty()) return attempt(true);
  reap(false);
  if (uint64_t p = attempt(false)) return p;
  bool waits_for_sync = std::any_of(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.marker; });
  if (waits_for_sync && stats_.pending_bytes >= chunk_bytes_ / 2) {
    reap(true);
    if (uint64_t p = attempt(false)) return p;
  }
  if (uint64_t p = attempt(true)) return p;
  if (pending_.empty()) return 0;
  reap(true);
  return attempt(false);
}

uint64_t ChunkPool::allocate(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (slots_.empty()) return 0;
  uint64_t want = RangeAllocator::rounded(bytes ? bytes : 1);
  if (want <= chunk_bytes_) return with_reuse([&](bool grow) { return allocate_small(want, grow); });
  return with_reuse([&](bool grow) { return allocate_run(want, grow); });
}

uint64_t ChunkPool::allocate_small(uint64_t bytes, bool grow) {
  uint32_t target = UINT32_MAX;
  for (uint32_t i = 0; i < slots_.size() && target == UINT32_MAX; ++i)
    if (slots_[i].state == SlotState::small && slots_[i].blocks->largest_free() >= bytes) target = i;
  if (target == UINT32_MAX && grow) {
    // A new chunk, from the top of the range: runs take the bottom, so they stay contiguous.
    for (uint32_t i = static_cast<uint32_t>(slots_.size()); i-- > 0;)
      if (slots_[i].state == SlotState::unmapped) {
        if (fill_slots({i})) target = i;
        break;
      }
  }
  if (target == UINT32_MAX) return 0;
  Slot& s = slots_[target];
  uint64_t offset = s.blocks->allocate(bytes);
  if (offset == RangeAllocator::kNone) return 0;
  uint64_t ptr = slot_va(target) + offset;
  ++s.live;
  blocks_[ptr] = Block{bytes, target, 0};
  stats_.live_bytes += bytes;
  return ptr;
}

uint64_t ChunkPool::allocate_run(uint64_t bytes, bool grow) {
  const uint32_t n = static_cast<uint32_t>((bytes + chunk_bytes_ - 1) / chunk_bytes_);
  auto usable = [&](uint32_t i) { return slot_idle(i) || (grow && slots_[i].state == SlotState::unmapped); };
  uint32_t start = 0, length = 0;
  for (uint32_t i = 0; i < slots_.size() && length < n; ++i) {
    if (usable(i)) {
      if (length++ == 0) start = i;
    } else {
      length = 0;
    }
  }
  if (length < n) return 0;
  std::vector<uint32_t> fresh;
  for (uint32_t i = start; i < start + n; ++i)
    if (slots_[i].state == SlotState::unmapped) fresh.push_back(i);
  if (!fresh.empty() && !fill_slots(fresh)) return 0;
  for (uint32_t i = start; i < start + n; ++i) {
    slots_[i].state = SlotState::run;
    slots_[i].blocks.reset();
    slots_[i].run_head = start;
  }
  slots_[start].live = 1;
  uint64_t ptr = slot_va(start);
  blocks_[ptr] = Block{bytes, start, n};
  stats_.live_bytes += bytes;
  return ptr;
}

// Chunks from tandemd first (other processes' released memory: zero-filled here, since it
// changes owner), then new ones made here and registered with tandemd.
bool ChunkPool::fill_slots(const std::vector<uint32_t>& slots) {
  size_t mapped = 0;
  bool ok = true;
  std::vector<uint64_t> give_back;
  if (broker_.linked()) {
    for (const GrantedChunk& g : broker_.acquire(slots.size() * chunk_bytes_, chunk_bytes_)) {
      uint64_t handle = 0;
      bool imported = mapped < slots.size() && driver_.import_fd(g.fd, handle);
      ++stats_.driver_calls;
      close(g.fd);
      if (imported && map_chunk(slots[mapped], handle, g.id, true)) {
        ++mapped;
        ++stats_.chunks_received;
      } else {
        if (imported) driver_.release(handle);
        give_back.push_back(g.id);  // not usable here: back to the pool
      }
    }
  }
  while (ok && mapped < slots.size()) {
    uint64_t handle = 0;
    ++stats_.driver_calls;
    if (!driver_.create(chunk_bytes_, handle)) {
      ok = false;
      break;
    }
    if (!map_chunk(slots[mapped], handle, 0, false)) {
      driver_.release(handle);
      ok = false;
      break;
    }
    ++stats_.chunks_created;
    if (broker_.linked()) {
      int fd = driver_.export_fd(handle);
      ++stats_.driver_calls;
      if (fd >= 0) {
        slots_[slots[mapped]].daemon_id = broker_.register_chunk(fd, chunk_bytes_);
        close(fd);
      }
    }
    ++mapped;
  }
  if (!ok)  // all or none: what was mapped for this request goes back
    for (size_t i = 0; i < mapped; ++i) unmap_chunk(slots[i], give_back);
  if (!give_back.empty()) broker_.release(give_back);
  return ok;
}

bool ChunkPool::map_chunk(uint32_t slot, uint64_t handle, uint64_t daemon_id, bool zero) {
  uint64_t va = slot_va(slot);
  stats_.driver_calls += zero ? 2 : 1;
  if (!driver_.map(va, chunk_bytes_, handle)) return false;
  if (zero && !driver_.zero(va, chunk_bytes_)) {
    driver_.unmap(va, chunk_bytes_);
    return false;
  }
  Slot& s = slots_[slot];
  s.state = SlotState::small;
  s.handle = handle;
  s.daemon_id = daemon_id;
  s.blocks = std::make_unique<RangeAllocator>(chunk_bytes_);
  s.live = s.pending = 0;
  stats_.held_bytes += chunk_bytes_;
  return true;
}

void ChunkPool::unmap_chunk(uint32_t slot, std::vector<uint64_t>& released_ids) {
  Slot& s = slots_[slot];
  driver_.unmap(slot_va(slot), chunk_bytes_);
  driver_.release(s.handle);  // tandemd's descriptor keeps a registered chunk alive
  stats_.driver_calls += 2;
  if (s.daemon_id) released_ids.push_back(s.daemon_id);
  s = Slot{};
  stats_.held_bytes -= chunk_bytes_;
  ++stats_.chunks_released;
}

bool ChunkPool::free(uint64_t ptr, bool stream_ordered, void* stream, bool per_thread, uint64_t* bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return false;
  Block b = it->second;
  blocks_.erase(it);
  if (bytes) *bytes = b.bytes;
  // A marker that cannot be recorded (a stream being captured) waits for a synchronization.
  void* marker = stream_ordered ? driver_.record(stream, per_thread) : nullptr;
  pending_.push_back(Pending{ptr, marker});
  pending_blocks_[ptr] = b;
  Slot& s = slots_[b.slot];
  --s.live;
  ++s.pending;
  stats_.live_bytes -= b.bytes;
  stats_.pending_bytes += b.bytes;
  return true;
}

void ChunkPool::reap(bool synchronize) {
  if (pending_.empty()) return;
  if (synchronize) {
    driver_.synchronize();
    ++stats_.syncs;
  }
  auto finished = [&](Pending& p) {
    bool done = p.marker ? synchronize || driver_.done(p.marker) : synchronize;
    if (!done) return false;
    if (p.marker) driver_.recycle(p.marker);
    finish_free(p.ptr);
    return true;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), finished), pending_.end());
}

void ChunkPool::finish_free(uint64_t ptr) {
  auto it = pending_blocks_.find(ptr);
  if (it == pending_blocks_.end()) return;
  Block b = it->second;
  pending_blocks_.erase(it);
  Slot& head = slots_[b.slot];
  --head.pending;
  stats_.pending_bytes -= b.bytes;
  if (!b.run) {
    head.blocks->free(ptr - slot_va(b.slot));
    return;
  }
  for (uint32_t i = b.slot; i < b.slot + b.run; ++i) {  // the run's chunks become single chunks
    slots_[i].state = SlotState::small;
    slots_[i].blocks = std::make_unique<RangeAllocator>(chunk_bytes_);
    slots_[i].run_head = 0;
  }
}

uint64_t ChunkPool::trim_locked(uint64_t target_bytes, bool may_synchronize) {
  if (stats_.held_bytes <= target_bytes) return 0;
  reap(false);
  if (may_synchronize && !pending_.empty() && stats_.held_bytes - idle_bytes_locked() > target_bytes) reap(true);
  std::vector<uint64_t> ids;
  uint64_t released = 0;
  for (uint32_t i = static_cast<uint32_t>(slots_.size()); i-- > 0 && stats_.held_bytes > target_bytes;) {
    if (!slot_idle(i)) continue;
    unmap_chunk(i, ids);
    released += chunk_bytes_;
  }
  if (!ids.empty()) broker_.release(ids);
  return released;
}

uint64_t ChunkPool::trim(uint64_t target_bytes, bool may_synchronize) {
  std::lock_guard<std::mutex> lock(mutex_);
  return trim_locked(target_bytes, may_synchronize);
}

uint64_t ChunkPool::try_trim(uint64_t target_bytes, bool may_synchronize) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  return lock.owns_lock() ? trim_locked(target_bytes, may_synchronize) : 0;
}

PoolStats ChunkPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolStats s = stats_;
  s.idle_bytes = idle_bytes_locked();
  return s;
}

bool ChunkPool::try_usage(uint64_t& held, uint64_t& live) const {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  held = stats_.held_bytes;
  live = stats_.live_bytes;
  return true;
}

uint64_t ChunkPool::chunks_received() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.chunks_received;
}

bool ChunkPool::check(const char** why) const {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t held = 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.state == SlotState::unmapped) continue;
    held += chunk_bytes_;
    if (s.state == SlotState::small && (!s.blocks || !s.blocks->check(why))) return false;
    if (s.state == SlotState::run && slots_[s.run_head].state != SlotState::run)
      return *why = "a run slot whose head is not part of a run", false;
  }
  if (held != stats_.held_bytes) return *why = "held bytes do not match the mapped slots", false;
  for (const auto& [ptr, b] : blocks_)
    if (pending_blocks_.count(ptr)) return *why = "a block both live and pending", false;
  return true;
}

}  // namespace tandem::memory
