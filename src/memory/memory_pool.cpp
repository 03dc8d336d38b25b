#include "memory_pool.h"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

namespace tandem::scheduler {

namespace {
// Free to hand out: no owner, and not an exited-or-not orphan's.
bool is_free(const PoolChunk& c) { return c.owner == 0 && c.orphan_pidfd < 0; }

bool exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) != 0;  // readable (or an error): the process exited
}
}  // namespace

MemoryPool::MemoryPool() { epoll_fd_ = epoll_create1(EPOLL_CLOEXEC); }

MemoryPool::~MemoryPool() {
  for (auto& [id, c] : chunks_) close(c.fd);
  for (auto& [pidfd, ids] : orphans_) close(pidfd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void MemoryPool::own(uint64_t owner, uint64_t bytes) {
  if (owner) held_[owner] += bytes;
}

void MemoryPool::disown(uint64_t owner, uint64_t bytes) {
  auto it = held_.find(owner);
  if (it == held_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (!it->second) held_.erase(it);
}

uint64_t MemoryPool::add(int fd, uint64_t bytes, const std::string& gpu, uint64_t owner, const std::string& domain) {
  uint64_t id = next_id_++;
  chunks_[id] = PoolChunk{id, fd, bytes, gpu, owner, -1, domain};
  own(owner, bytes);
  return id;
}

std::vector<const PoolChunk*> MemoryPool::take(const std::string& gpu, uint64_t bytes, uint32_t count, uint64_t owner,
                                               const std::string& domain) {
  std::vector<const PoolChunk*> out;
  for (auto& [id, c] : chunks_) {
    if (out.size() >= count) break;
    if (!is_free(c) || c.gpu != gpu || c.bytes != bytes || c.domain != domain) continue;
    c.owner = owner;
    own(owner, c.bytes);
    out.push_back(&c);
  }
  return out;
}

uint32_t MemoryPool::release(uint64_t owner, const std::vector<uint64_t>& ids) {
  uint32_t n = 0;
  for (uint64_t id : ids) {
    auto it = chunks_.find(id);
    if (it == chunks_.end() || it->second.owner != owner || owner == 0) continue;
    it->second.owner = 0;
    disown(owner, it->second.bytes);
    ++n;
  }
  return n;
}

void MemoryPool::disconnect(uint64_t owner, int pidfd) {
  std::vector<uint64_t> ids;
  for (auto& [id, c] : chunks_) {
    if (c.owner != owner || owner == 0) continue;
    c.owner = 0;
    disown(owner, c.bytes);
    if (pidfd >= 0) {
      c.orphan_pidfd = pidfd;
      ids.push_back(id);
    }
  }
  if (pidfd < 0) return;
  if (ids.empty()) {
    close(pidfd);
    return;
  }
  orphans_[pidfd] = std::move(ids);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = pidfd;
  if (epoll_fd_ < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pidfd, &ev) != 0) unwatched_.push_back(pidfd);
  reap_orphans();  // a crashed process is gone already
}

void MemoryPool::free_orphan(int pidfd, std::vector<std::string>& gpus) {
  auto it = orphans_.find(pidfd);
  if (it == orphans_.end()) return;
  for (uint64_t id : it->second) {
    auto c = chunks_.find(id);
    if (c == chunks_.end() || c->second.orphan_pidfd != pidfd) continue;
    c->second.orphan_pidfd = -1;
    if (std::find(gpus.begin(), gpus.end(), c->second.gpu) == gpus.end()) gpus.push_back(c->second.gpu);
  }
  orphans_.erase(it);
  std::erase(unwatched_, pidfd);
  if (epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pidfd, nullptr);
  close(pidfd);
}

std::vector<std::string> MemoryPool::reap_orphans() {
  std::vector<std::string> gpus;
  if (orphans_.empty()) return gpus;
  std::vector<int> gone;
  if (epoll_fd_ >= 0) {
    epoll_event events[64];
    for (int n = 64; n == 64;) {
      n = epoll_wait(epoll_fd_, events, 64, 0);
      for (int i = 0; i < n; ++i) gone.push_back(events[i].data.fd);
      if (n == 64) {  // more may be ready: free these first, or the same 64 come back
        for (int fd : gone) free_orphan(fd, gpus);
        gone.clear();
      }
    }
  }
  for (int fd : unwatched_)
    if (exited(fd)) gone.push_back(fd);
  for (int fd : gone) free_orphan(fd, gpus);
  return gpus;
}

void MemoryPool::forget_gpu(const std::string& gpu) {
  std::vector<int> pidfds;
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    if (it->second.gpu != gpu) {
      ++it;
      continue;
    }
    if (it->second.orphan_pidfd >= 0) pidfds.push_back(it->second.orphan_pidfd);
    disown(it->second.owner, it->second.bytes);
    close(it->second.fd);
    it = chunks_.erase(it);
  }
  // An orphan's chunks are all on its one GPU: its pidfd goes with them.
  std::vector<std::string> ignored;
  for (int fd : pidfds) free_orphan(fd, ignored);
}

bool MemoryPool::has_chunks_on(const std::string& gpu) const {
  for (const auto& [id, c] : chunks_)
    if (c.gpu == gpu) return true;
  return false;
}

uint64_t MemoryPool::held_by(uint64_t owner) const {
  auto it = held_.find(owner);
  return it == held_.end() ? 0 : it->second;
}

size_t MemoryPool::chunks_owned(uint64_t owner) const {
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
  // First what processes hold over their quotas (owed, whole chunks), then quota cuts.
  std::vector<uint64_t> owed(trainings.size(), 0);
  for (size_t i = 0; i < trainings.size() && plan.taken < want; ++i) {
    const TrainingHolder& t = trainings[i];
    uint64_t over = t.quota && t.held > t.quota ? t.held - t.quota : 0;
    owed[i] = std::min(over / chunk_bytes * chunk_bytes, want - plan.taken);
    plan.taken += owed[i];
  }
  for (size_t i = 0; i < trainings.size(); ++i) {
    const TrainingHolder& t = trainings[i];
    // What it may keep now: its pooled memory, or less when its quota is already lower.
    uint64_t keeps = t.quota && t.quota < t.held ? t.quota : t.held;
    uint64_t spare = keeps - std::min(keeps, t.floor);
    uint64_t take = plan.taken < want ? std::min(spare / chunk_bytes * chunk_bytes, want - plan.taken) : 0;
    if (!take && !owed[i]) continue;
    plan.taken += take;
    plan.cuts.push_back({t.client, take ? std::max<uint64_t>(keeps - take, 1) : t.quota, take, owed[i]});
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
