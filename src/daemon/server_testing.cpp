// The server driven in-process, without its poll loop: the fuzz harness (tests/fuzz) and unit
// tests hand it one end of a socketpair, run one turn for that client, and check after every
// step that what a hostile client sent left the daemon's own state consistent.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "daemon_limits.h"
#include "server.h"

namespace tandem::scheduler {

namespace {

bool fd_open(int fd) { return fd >= 0 && fcntl(fd, F_GETFD) != -1; }

}  // namespace

Client* Server::client_by_fd_for_test(int fd) {
  for (auto& [id, c] : registry_.clients())
    if (c.fd == fd) return &c;
  return nullptr;
}

bool Server::adopt_client_for_test(int fd) {
  // The defaults open() would complete: tandemd's uid and, for the socket's group, its gid.
  daemon_uid_ = geteuid();
  options_.access.finalize(daemon_uid_, getegid());
  PeerIdentity peer;
  std::string error;
  if (!read_peer_identity(fd, peer, error)) return false;
  admit(fd, std::move(peer));
  return true;
}

bool Server::serve_client_for_test(int fd) {
  // Turns of the loop for this client until what it sent so far is handled (a turn handles a
  // bounded number of messages), each followed by the loop's reaping.
  for (int turn = 0; turn < 64; ++turn) {
    Client* c = client_by_fd_for_test(fd);
    if (!c) return false;
    size_t before = c->in.buffered();
    serve(*c, POLLIN | POLLOUT);
    reap_closing();
    c = client_by_fd_for_test(fd);
    if (!c) return false;
    if (!c->in.has_message() && c->in.buffered() <= before) break;
  }
  return true;
}

std::string Server::invariant_violation_for_test() const {
  auto client_text = [](const Client& c) { return "client " + std::to_string(c.id) + " (fd " + std::to_string(c.fd) + "): "; };
  std::set<std::pair<std::string, int>> slots_held;
  std::map<std::string, uint32_t> slots_per_gpu;
  uint64_t held_by_clients = 0;
  for (const auto& [id, c] : registry_.clients()) {
    if (id != c.id) return client_text(c) + "filed under id " + std::to_string(id);
    if (c.closing) return client_text(c) + "left closing after the loop's reaping";
    if (!fd_open(c.fd)) return client_text(c) + "its socket is closed";
    // The loop drops a client that holds more; no descriptor may be lost or reused.
    if (c.passed_fds.size() > limits::kMaxPassedFds) return client_text(c) + "holds too many passed descriptors";
    for (int passed : c.passed_fds)
      if (!fd_open(passed)) return client_text(c) + "a passed descriptor is closed";
    held_by_clients += pool_.held_by(id);
    if (c.slot < 0) {
      if (pool_.chunks_owned(id)) return client_text(c) + "pooled chunks without a slot";
      continue;
    }
    if (c.pidfd >= 0 && !fd_open(c.pidfd)) return client_text(c) + "its pidfd is closed";
    if (!c.registered) return client_text(c) + "a slot without a hello";
    auto g = gpus_.find(c.gpu);
    if (g == gpus_.end()) return client_text(c) + "a slot on an unknown GPU";
    const tandem_shm_header* shm = g->second->segment().shm();
    if (!shm || c.slot >= static_cast<int>(TANDEM_MAX_SLOTS)) return client_text(c) + "a slot out of range";
    const tandem_slot& s = shm->slots[c.slot];
    if (s.state != TANDEM_SLOT_ACTIVE || s.pid != c.pid) return client_text(c) + "its slot is not active for its pid";
    if (!slots_held.insert({c.gpu, c.slot}).second) return client_text(c) + "shares its slot with another client";
    ++slots_per_gpu[c.gpu];
    if (c.pool_taken_bytes && c.role != "training") return client_text(c) + "quota taken from a non-training process";
  }
  uint64_t pooled = 0, free_or_orphaned = 0;
  for (const auto& [uuid, g] : gpus_) {
    const tandem_shm_header* shm = g->segment().shm();
    uint32_t active = 0;
    for (uint32_t i = 0; shm && i < TANDEM_MAX_SLOTS; ++i) active += shm->slots[i].state == TANDEM_SLOT_ACTIVE;
    // A slot whose client is gone would stay taken forever (and its gate closed).
    if (active != slots_per_gpu[uuid])
      return "GPU " + uuid + ": " + std::to_string(active) + " active slots for " +
             std::to_string(slots_per_gpu[uuid]) + " clients";
    MemoryPool::Totals t = pool_.totals(uuid);
    if (t.free_bytes + t.orphaned_bytes > t.bytes) return "GPU " + uuid + ": pool counts more free than it holds";
    pooled += t.bytes;
    free_or_orphaned += t.free_bytes + t.orphaned_bytes;
  }
  // Every chunk is free, an orphan's, or a live client's: an owner that is gone would hand
  // its chunks to whichever connection gets its fd number next.
  if (pooled != free_or_orphaned + held_by_clients)
    return "pool: " + std::to_string(pooled) + " bytes pooled but " + std::to_string(free_or_orphaned) +
           " free or orphaned and " + std::to_string(held_by_clients) + " held by clients";
  for (const PoolWait& w : pool_waits_) {
    auto c = registry_.clients().find(w.client);
    if (c == registry_.clients().end()) return "a pool wait for a client that is gone";
    if (c->second.slot < 0 || c->second.role != "inference") return "a pool wait for a client that may not wait";
    if (w.given >= w.wanted) return "a pool wait that was served in full";
  }
  // A verified mark outliving its GPU's state would let a made-up UUID reused later skip the
  // bounds on unverified GPUs (gpu_admission.h).
  for (const std::string& uuid : verified_gpus_)
    if (!gpus_.count(uuid)) return "GPU " + uuid + " marked verified without a state";
  return "";
}

}  // namespace tandem::scheduler
