#include "memory_pool.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>

namespace tandem::scheduler {

namespace {
// Free to hand out: no owner, and not an exited-or-not orphan's.
bool is_free(const PoolChunk& c) { return c.owner == -1 && c.orphan_pidfd < 0; }
}  // namespace

MemoryPool::~MemoryPool() {
  std::vector<int> pidfds;  // shared by an orphan's chunks: closed once
  for (auto& [id, c] : chunks_) {
    close(c.fd);
    if (c.orphan_pidfd >= 0 && std::find(pidfds.begin(), pidfds.end(), c.orphan_pidfd) == pidfds.end())
      pidfds.push_back(c.orphan_pidfd);
  }
  for (int fd : pidfds) close(fd);
}

uint64_t MemoryPool::add(int fd, uint64_t bytes, const std::string& gpu, int owner, const std::string& domain) {
  uint64_t id = next_id_++;
  chunks_[id] = PoolChunk{id, fd, bytes, gpu, owner, -1, domain};
  return id;
}

std::vector<const PoolChunk*> MemoryPool::take(const std::string& gpu, uint64_t bytes, uint32_t count, int owner,
                                               const std::string& domain) {
  std::vector<const PoolChunk*> out;
  for (auto& [id, c] : chunks_) {
    if (out.size() >= count) break;
    if (!is_free(c) || c.gpu != gpu || c.bytes != bytes || c.domain != domain) continue;
    c.owner = owner;
    out.push_back(&c);
  }
  return out;
}

uint32_t MemoryPool::release(int owner, const std::vector<uint64_t>& ids) {
  uint32_t n = 0;
  for (uint64_t id : ids) {
    auto it = chunks_.find(id);
    if (it == chunks_.end() || it->second.owner != owner || owner < 0) continue;
    it->second.owner = -1;
    ++n;
  }
  return n;
}

void MemoryPool::disconnect(int owner, int pidfd) {
  bool orphaned = false;
  for (auto& [id, c] : chunks_) {
    if (c.owner != owner) continue;
    c.owner = -1;
    if (pidfd >= 0) {
      c.orphan_pidfd = pidfd;
      orphaned = true;
    }
  }
  if (pidfd >= 0 && !orphaned) close(pidfd);
  reap_orphans();
}

std::vector<std::string> MemoryPool::reap_orphans() {
  std::vector<std::string> gpus;
  std::vector<int> exited;
  for (auto& [id, c] : chunks_) {
    if (c.orphan_pidfd < 0) continue;
    bool gone = std::find(exited.begin(), exited.end(), c.orphan_pidfd) != exited.end();
    if (!gone) {
      pollfd p{c.orphan_pidfd, POLLIN, 0};
      gone = poll(&p, 1, 0) != 0;  // readable (or an error): the process exited
      if (gone) exited.push_back(c.orphan_pidfd);
    }
    if (gone) {
      c.orphan_pidfd = -1;
      if (std::find(gpus.begin(), gpus.end(), c.gpu) == gpus.end()) gpus.push_back(c.gpu);
    }
  }
  for (int fd : exited) close(fd);
  return gpus;
}

uint64_t MemoryPool::held_by(int owner) const {
  uint64_t bytes = 0;
  for (const auto& [id, c] : chunks_)
    if (c.owner == owner) bytes += c.bytes;
  return bytes;
}

size_t MemoryPool::chunks_owned(int owner) const {
  size_t n = 0;
  for (const auto& [id, c] : chunks_) n += c.owner == owner;
  return n;
}

uint64_t MemoryPool::free_bytes(const std::string& gpu, uint64_t chunk_bytes, const std::string& domain) const {
  uint64_t bytes = 0;
  for (const auto& [id, c] : chunks_)
    if (is_free(c) && c.gpu == gpu && c.bytes == chunk_bytes && c.domain == domain) bytes += c.bytes;
  return bytes;
}

uint64_t MemoryPool::free_bytes_outside(const std::string& gpu, uint64_t chunk_bytes, const std::string& domain) const {
  uint64_t bytes = 0;
  for (const auto& [id, c] : chunks_)
    if (is_free(c) && c.gpu == gpu && c.bytes == chunk_bytes && c.domain != domain) bytes += c.bytes;
  return bytes;
}

MemoryPool::Totals MemoryPool::totals(const std::string& gpu) const {
  Totals t;
  for (const auto& [id, c] : chunks_) {
    if (c.gpu != gpu) continue;
    ++t.chunks;
    t.bytes += c.bytes;
    if (c.orphan_pidfd >= 0) t.orphaned_bytes += c.bytes;
    if (is_free(c)) ++t.free_chunks, t.free_bytes += c.bytes;
  }
  return t;
}

ReclaimPlan plan_reclaim(uint64_t shortfall, uint64_t watermark, uint64_t chunk_bytes,
                         std::vector<TrainingHolder> trainings) {
  ReclaimPlan plan;
  if (!chunk_bytes || !shortfall) return plan;
  uint64_t want = (shortfall + watermark + chunk_bytes - 1) / chunk_bytes * chunk_bytes;
  std::sort(trainings.begin(), trainings.end(), [](const auto& a, const auto& b) { return a.held > b.held; });
  for (const TrainingHolder& t : trainings) {
    if (plan.taken >= want) break;
    // What it may keep now: its pooled memory, or less when its quota is already lower.
    uint64_t keeps = t.quota && t.quota < t.held ? t.quota : t.held;
    uint64_t take = std::min(keeps / chunk_bytes * chunk_bytes, want - plan.taken);
    if (!take) continue;
    plan.taken += take;
    plan.cuts.push_back({t.client, std::max<uint64_t>(keeps - take, 1), take});
  }
  // The watermark is a wish; only the shortfall itself can be missing.
  uint64_t needed = (shortfall + chunk_bytes - 1) / chunk_bytes * chunk_bytes;
  plan.missing = plan.taken >= needed ? 0 : needed - plan.taken;
  return plan;
}

uint64_t give_back_bytes(uint64_t free_bytes, uint64_t watermark, uint64_t chunk_bytes, uint64_t taken_before) {
  if (!chunk_bytes || free_bytes <= watermark) return 0;
  uint64_t surplus = (free_bytes - watermark) / chunk_bytes * chunk_bytes;
  return std::min(surplus, taken_before);
}

}  // namespace tandem::scheduler
