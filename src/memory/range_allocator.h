// Sub-allocation inside one pool chunk (DESIGN §6): first fit over a free list ordered by
// offset, with neighbours coalesced on free. Small and simple on purpose: a chunk holds at most
// a few thousand blocks, allocations are not on any launch path, and the invariants below are
// cheap to check (debug builds check them after every change; the unit tests always do).
#pragma once
#include <cstdint>
#include <map>

namespace tandem::memory {

class RangeAllocator {
 public:
  static constexpr uint64_t kAlignment = 512;  // what cudaMalloc's callers (PyTorch) round to
  static constexpr uint64_t kNone = ~0ull;

  explicit RangeAllocator(uint64_t size);

  // The offset of a new block of at least `bytes` (rounded up to kAlignment), or kNone.
  uint64_t allocate(uint64_t bytes);
  // Returns the block at `offset`; false when there is none (nothing changes).
  bool free(uint64_t offset);

  uint64_t size() const { return size_; }
  uint64_t free_bytes() const { return free_bytes_; }
  bool empty() const { return used_.empty(); }
  // The largest block allocate() could return now.
  uint64_t largest_free() const;
  static uint64_t rounded(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  // Free and used ranges tile [0, size) exactly, free ranges never touch (they would have been
  // merged), and free_bytes matches. Returns false (and leaves `why`) on the first violation.
  bool check(const char** why) const;

 private:
  void check_in_debug() const;

  uint64_t size_;
  uint64_t free_bytes_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes
  std::map<uint64_t, uint64_t> used_;  // offset -> bytes
};

}  // namespace tandem::memory
