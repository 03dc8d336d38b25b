#include "range_allocator.h"

#include <cstdio>
#include <cstdlib>

namespace tandem::memory {

RangeAllocator::RangeAllocator(uint64_t size) : size_(size / kAlignment * kAlignment), free_bytes_(size_) {
  if (size_) free_[0] = size_;
}

uint64_t RangeAllocator::allocate(uint64_t bytes) {
  uint64_t want = rounded(bytes ? bytes : 1);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    uint64_t offset = it->first, left = it->second - want;
    free_.erase(it);
    if (left) free_[offset + want] = left;
    used_[offset] = want;
    free_bytes_ -= want;
    check_in_debug();
    return offset;
  }
  return kNone;
}

bool RangeAllocator::free(uint64_t offset) {
  auto used = used_.find(offset);
  if (used == used_.end()) return false;
  uint64_t bytes = used->second;
  used_.erase(used);
  free_bytes_ += bytes;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {  // merge with the range after
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // merge with the range before
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      check_in_debug();
      return true;
    }
  }
  free_[offset] = bytes;
  check_in_debug();
  return true;
}

uint64_t RangeAllocator::largest_free() const {
  uint64_t largest = 0;
  for (const auto& [offset, bytes] : free_)
    if (bytes > largest) largest = bytes;
  return largest;
}

bool RangeAllocator::check(const char** why) const {
  auto f = free_.begin();
  auto u = used_.begin();
  uint64_t at = 0, free_total = 0;
  bool last_was_free = false;
  while (f != free_.end() || u != used_.end()) {
    bool take_free = u == used_.end() || (f != free_.end() && f->first < u->first);
    const auto& range = take_free ? *f : *u;
    if (range.first != at) return *why = "ranges leave a gap or overlap", false;
    if (range.second == 0 || range.second % kAlignment) return *why = "a range of a size off the alignment", false;
    if (take_free && last_was_free) return *why = "two free ranges touch (not merged)", false;
    if (take_free) free_total += range.second;
    last_was_free = take_free;
    at += range.second;
    take_free ? ++f : ++u;
  }
  if (at != size_) return *why = "ranges do not cover the chunk", false;
  if (free_total != free_bytes_) return *why = "free byte count is off", false;
  return true;
}

void RangeAllocator::check_in_debug() const {
#ifndef NDEBUG
  const char* why = nullptr;
  if (!check(&why)) {
    std::fprintf(stderr, "tandem: pool sub-allocator invariant broken: %s\n", why);
    std::abort();
  }
#endif
}

}  // namespace tandem::memory
