// tandemd's side of the node's memory pool (DESIGN §6, docs/memory.md): the chunks processes
// registered, whose descriptors the daemon holds (so a chunk outlives the process that made
// it, and the daemon needs no CUDA context), who owns each, and SIRIUS's reallocation rule.
// Ownership follows the client's connection (its never-reused id); a closed connection returns
// its chunks only when the process is really gone (its pidfd says so): a live process may
// still have them mapped. The pidfds of such orphans are watched by one epoll descriptor, so
// a tick costs one non-blocking epoll_wait however many chunks wait, not a scan of them all.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tandem::scheduler {

struct PoolChunk {
  uint64_t id = 0;
  int fd = -1;  // the daemon's descriptor of the chunk
  uint64_t bytes = 0;
  std::string gpu;
  uint64_t owner = 0;  // id of the client connection holding it; 0: free
  int orphan_pidfd = -1;  // owner's connection closed, process maybe alive: free when this fires
  // The trust domain of the process that created it, and of every holder since: a chunk never
  // leaves it (an imported handle cannot be revoked, and zero-fill at a change of owner
  // protects only a receiver that cooperates; docs/security.md).
  std::string domain;
};

class MemoryPool {
 public:
  MemoryPool();
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;
  // Registers a chunk a client of trust domain `domain` created (the pool keeps `fd`). Its id.
  uint64_t add(int fd, uint64_t bytes, const std::string& gpu, uint64_t owner, const std::string& domain);
  // Up to `count` free chunks of `bytes` on `gpu` and of `domain`, now owned by `owner`.
  std::vector<const PoolChunk*> take(const std::string& gpu, uint64_t bytes, uint32_t count, uint64_t owner,
                                     const std::string& domain);
  // Chunks `owner` gave back (others' ids are ignored). How many became free.
  uint32_t release(uint64_t owner, const std::vector<uint64_t>& ids);
  // The owner's connection closed. `pidfd` (-1: unknown, taken as gone) tells when the
  // process is gone; until then its chunks stay out of reach. Takes `pidfd`.
  void disconnect(uint64_t owner, int pidfd);
  // Frees the chunks of orphans whose process exited: O(1) when none did. The GPUs that
  // gained free chunks.
  std::vector<std::string> reap_orphans();
  // Gives up every chunk on `gpu` (closes the daemon's descriptors): its state is evicted.
  void forget_gpu(const std::string& gpu);

  size_t size() const { return chunks_.size(); }
  size_t orphan_processes() const { return orphans_.size(); }
  bool has_chunks_on(const std::string& gpu) const;
  uint64_t held_by(uint64_t owner) const;
  // Free chunks of `chunk_bytes` on `gpu` that `domain` may take.
  uint64_t free_bytes(const std::string& gpu, uint64_t chunk_bytes, const std::string& domain) const;
  // Free chunks of `chunk_bytes` on `gpu` that belong to other domains than `domain`.
  uint64_t free_bytes_outside(const std::string& gpu, uint64_t chunk_bytes, const std::string& domain) const;
  struct Totals {
    uint64_t chunks = 0, bytes = 0, free_chunks = 0, free_bytes = 0, orphaned_bytes = 0;
  };
  Totals totals(const std::string& gpu) const;
  size_t chunks_owned(uint64_t owner) const;

 private:
  void free_orphan(int pidfd, std::vector<std::string>& gpus);

  void own(uint64_t owner, uint64_t bytes);
  void disown(uint64_t owner, uint64_t bytes);

  std::map<uint64_t, PoolChunk> chunks_;  // by id
  uint64_t next_id_ = 1;
  std::map<uint64_t, uint64_t> held_;  // owner -> bytes it holds: the status asks per slot
  std::map<int, std::vector<uint64_t>> orphans_;  // exited-or-not process's pidfd -> its chunks
  int epoll_fd_ = -1;  // watches the orphans' pidfds (readable when the process exited)
  std::vector<int> unwatched_;  // orphans epoll could not take: polled each tick instead
};

// SIRIUS Algorithm 1, InferRequire, on the training side: to give inference `shortfall`
// bytes plus the watermark W, in whole chunks, lower the quota of the training processes that
// hold the most pooled memory. Each entry's new quota is returned; `missing` is what even
// every training process's whole pooled memory could not cover ("nothing left to give").
struct TrainingHolder {
  uint64_t client = 0;
  uint64_t held = 0;   // pooled bytes it holds
  uint64_t quota = 0;  // its quota now (0: none)
  uint64_t floor = 0;  // what it keeps whatever is asked: its working set, unless it frees on request
};
// A process that holds more than its quota owes the rest: it gives that back when asked (its
// quota set again, even to the same value), before any quota is cut.
struct QuotaCut {
  uint64_t client = 0;
  uint64_t quota = 0;  // its new quota (at least 1: 0 means "none" in the shared memory)
  uint64_t taken = 0;  // what the cut takes from what it may keep now
  uint64_t owed = 0;   // what it holds over its quota, asked back
};
struct ReclaimPlan {
  std::vector<QuotaCut> cuts;
  uint64_t taken = 0;  // what the cuts take, owed bytes included
  uint64_t missing = 0;
};
ReclaimPlan plan_reclaim(uint64_t shortfall, uint64_t watermark, uint64_t chunk_bytes,
                         std::vector<TrainingHolder> trainings);

// InferRelease, on the daemon's side: of the free memory beyond W, what may go back to
// training (whole chunks, at most what was taken from it).
uint64_t give_back_bytes(uint64_t free_bytes, uint64_t watermark, uint64_t chunk_bytes, uint64_t taken_before);

}  // namespace tandem::scheduler
