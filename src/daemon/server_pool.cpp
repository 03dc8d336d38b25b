// tandemd's memory-pool messages (docs/memory.md): chunks registered by the processes that
// made them, handed to processes that need memory, reclaimed from training for online
// inference (SIRIUS Algorithm 1), and back to the pool when a process is gone.
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "daemon_limits.h"
#include "futex.h"
#include "log.h"
#include "server.h"
#include "settings.h"

namespace tandem::scheduler {

namespace {

uint64_t setting_bytes(SettingId id) {
  MemorySize size;
  return parse_memory_size(setting_text(id), size) && !size.is_percent ? size.bytes : 0;
}

uint64_t watermark() { return setting_bytes(SettingId::TANDEM_MEM_WATERMARK); }
uint64_t pool_chunk_bytes() { return setting_bytes(SettingId::TANDEM_MEM_CHUNK); }

// What a training process keeps whatever online inference asks: the memory its steps use (its
// working set), so that an unmodified job's next step does not run out of memory; one that
// frees on request (a memory-pressure callback: train-sim --elastic, the micro-batch helper)
// shrinks instead, and SIRIUS's policy may cut it down to nothing.
uint64_t working_set_floor(const tandem_client_page& page) { return page.memory_elastic ? 0 : page.working_set_bytes; }

}  // namespace

bool Server::handle_pool_register(Client& client, const msg::PoolRegister& request, int fd) {
  if (client.slot < 0) {
    if (fd >= 0) close(fd);
    return reply_error(client, EPERM, "only a registered process with a GPU may pool memory");
  }
  if (fd < 0) return reply_error(client, EINVAL, "pool_register needs {\"bytes\": int} and the chunk's descriptor");
  if (client.chunks_registered >= options_.limits.chunks_per_client || pool_.size() >= options_.limits.pool_chunks) {
    close(fd);
    return reply_error(client, ENOSPC, "the pool holds as many chunks as tandemd keeps (" +
                                           std::to_string(options_.limits.chunks_per_client) + " per connection, " +
                                           std::to_string(options_.limits.pool_chunks) + " in all)");
  }
  ++client.chunks_registered;
  uint64_t id = pool_.add(fd, request.bytes, client.gpu, client.id, client.trust_domain);
  TANDEM_LOG_DEBUG("pid {} registered pool chunk {} ({} bytes)", client.pid, id, request.bytes);
  return reply(client, MessageType::pool_registered, msg::encode(msg::PoolRegistered{id, request.seq}));
}

// Descriptors need sendmsg: written directly, after every queued reply (the client asks one
// thing at a time, so there are none), as hello_ok does. A client that asked for batches gets
// up to kChunksPerMessage chunks a message, so a handover's cost hardly grows with its chunks;
// the others one a message.
bool Server::send_chunks(Client& client, const std::vector<const PoolChunk*>& chunks, uint64_t seq, bool batch) {
  constexpr size_t kChunksPerMessage = 64;  // the hook's kMaxReplyFds
  if (!client.out.empty() && !client.out.flush(client.fd)) return false;
  const size_t per_message = batch ? kChunksPerMessage : 1;
  for (size_t at = 0; at < chunks.size(); at += per_message) {
    size_t n = std::min(per_message, chunks.size() - at);
    std::vector<int> fds;
    msg::PoolChunk body{{}, seq, batch};
    for (size_t i = at; i < at + n; ++i) {
      fds.push_back(chunks[i]->fd);
      body.ids.push_back(chunks[i]->id);
    }
    if (!client.out.empty() ||
        !send_message_with_fds(client.fd, MessageType::pool_chunk, msg::encode(body), fds.data(), n))
      return false;
  }
  return true;
}

bool Server::handle_pool_acquire(Client& client, const msg::PoolAcquire& request) {
  if (client.slot < 0) return reply_error(client, EPERM, "only a registered process with a GPU may pool memory");
  const uint64_t bytes = request.bytes, chunk = request.chunk_bytes, seq = request.seq;
  const bool batch = request.batch;
  // One waiting acquisition per client: each costs a look at the pool every tick.
  if (std::any_of(pool_waits_.begin(), pool_waits_.end(), [&](const PoolWait& w) { return w.client == client.id; }))
    return reply_error(client, EBUSY, "an acquisition of this client is already waiting");
  uint32_t wanted = static_cast<uint32_t>(std::min<uint64_t>((bytes + chunk - 1) / chunk, 1u << 20));
  auto given = pool_.take(client.gpu, chunk, wanted, client.id, client.trust_domain);
  if (!send_chunks(client, given, seq, batch)) return false;
  uint32_t n = static_cast<uint32_t>(given.size());
  // A short answer counts when online inference did not get what it asked for; the others
  // are told "none free" as a matter of course and make chunks of their own.
  auto granted = [&](uint32_t count, std::string reason) {
    if (uint64_t elsewhere = count < wanted ? pool_.free_bytes_outside(client.gpu, chunk, client.trust_domain) : 0)
      reason += " (" + std::to_string(elsewhere >> 20) + " MiB free belong to other trust domains: not shared)";
    if (count < wanted && client.role == "inference") pool_figures_[client.gpu].short_answer(client.pid, reason);
    return reply(client, MessageType::pool_granted,
                 msg::encode(msg::PoolGranted{count, (wanted - count) * chunk, reason, seq, std::nullopt}));
  };
  if (n == wanted) return granted(n, "");
  // Only online inference takes memory from training; the others make chunks of their own
  // from the GPU's free memory.
  if (client.role != "inference") return granted(n, "no free chunks in the pool");
  // Only from training in its own trust domain: another domain's chunks could never reach it.
  std::vector<TrainingHolder> trainings;
  for (const auto& [id, c] : registry_.clients()) {
    if (c.role != "training" || c.gpu != client.gpu || c.slot < 0 || c.closing ||
        c.trust_domain != client.trust_domain)
      continue;
    const auto& segment = gpu(c.gpu)->segment();
    trainings.push_back({id, pool_.held_by(id), segment.shm()->slots[c.slot].assigned_quota_bytes,
                         working_set_floor(segment.view(c.slot).v)});
  }
  // Others of its trust domain already waiting on this GPU for chunks of this size are owed
  // what training holds over its quota first (they are served in order): counted once, for
  // all, so that this request is not planned on memory promised to an earlier one. (A wait for
  // another chunk size, a client's own choice, takes none of these chunks.)
  uint64_t promised = 0;
  for (const PoolWait& w : pool_waits_) {
    const Client* other = registry_.find(w.client);
    if (other && other->gpu == client.gpu && other->trust_domain == client.trust_domain && w.chunk_bytes == chunk)
      promised += uint64_t{w.wanted - w.given} * w.chunk_bytes;
  }
  ReclaimPlan plan = plan_reclaim(promised + (wanted - n) * chunk, watermark(), chunk, trainings);
  for (const QuotaCut& cut : plan.cuts) {
    Client* t = registry_.find(cut.client);
    if (cut.taken) {
      if (!t->pool_taken_bytes) t->quota_before_pool = assigned_quota(*t);
      t->pool_taken_bytes += cut.taken;
    }
    set_quota(*t, cut.quota);  // the same quota again still asks for what is held over it
    TANDEM_LOG_INFO("memory policy: training pid {} quota {} MiB ({} MiB cut, {} MiB held over it asked back) for "
                    "inference pid {}", t->pid, cut.quota >> 20, cut.taken >> 20, cut.owed >> 20, client.pid);
  }
  if (plan.taken <= promised) {
    TANDEM_LOG_WARN("memory policy: inference pid {} needs {} MiB; training in its trust domain ({}) has nothing left "
                    "to give", client.pid, ((wanted - n) * chunk) >> 20, client.trust_domain);
    return granted(n, "training has nothing left to give");
  }
  uint64_t now = monotonic_ns();
  uint64_t wait_ms = std::min<uint64_t>(request.wait_ms, setting_ns(SettingId::TANDEM_MEM_HANDOVER_MS) / kNsPerMs);
  PoolWait wait{client.id, seq, chunk, wanted, n, now, now + wait_ms * 1000000ull, batch, {}};
  for (const QuotaCut& cut : plan.cuts) wait.asked.push_back(cut.client);
  pool_waits_.push_back(std::move(wait));
  return true;
}

// Names the holders: the operator learns which process did not answer (stopped, hung, or its
// memory still live), not only that the requester came up short.
std::string Server::pool_wait_shortfall(const PoolWait& w, uint64_t now_ns) {
  std::string holders;
  for (ClientId id : w.asked) {
    auto c = registry_.clients().find(id);
    if (c == registry_.clients().end() || c->second.slot < 0) continue;
    uint64_t held = pool_.held_by(id);
    uint64_t quota = assigned_quota(c->second);
    if (held <= quota) continue;
    holders += (holders.empty() ? "" : ", ") + std::string("training pid ") + std::to_string(c->second.pid) +
               " holds " + std::to_string(held >> 20) + " MiB over its quota of " + std::to_string(quota >> 20) +
               " MiB";
  }
  std::string given = std::to_string(w.given) + " of " + std::to_string(w.wanted) + " chunks came within " +
                      std::to_string((now_ns - w.started_ns) / 1000000) + " ms";
  return holders.empty() ? "training gave memory back too late: " + given : given + "; " + holders;
}

bool Server::handle_pool_release(Client& client, const msg::PoolRelease& request) {
  uint32_t n = pool_.release(client.id, request.ids);
  if (!reply(client, MessageType::pool_released, msg::encode(msg::PoolReleased{n, request.seq})))
    return false;
  // May mark other clients closing (the loop reaps them after this turn), never destroys one:
  // `client` stays valid here.
  serve_pool_waits(monotonic_ns());
  if (client.role != "training") give_back_to_training(client.gpu);
  return true;
}

void Server::serve_pool_waits(uint64_t now_ns) {
  for (size_t i = 0; i < pool_waits_.size();) {
    PoolWait& w = pool_waits_[i];
    Client* c = registry_.find(w.client);
    bool finished = !c || c->closing;
    if (!finished) {
      auto given = pool_.take(c->gpu, w.chunk_bytes, w.wanted - w.given, c->id, c->trust_domain);
      if (!send_chunks(*c, given, w.seq, w.batch)) {
        // Gone or not reading: the loop disconnects it after this turn, which frees the
        // chunks just taken along with the rest of what it held.
        close_later(*c);
        pool_waits_.erase(pool_waits_.begin() + static_cast<long>(i));
        continue;
      }
      w.given += static_cast<uint32_t>(given.size());
      bool done = w.given == w.wanted;
      if (done || now_ns >= w.deadline_ns) {
        PoolFigures& f = pool_figures_[c->gpu];
        double ms = static_cast<double>(now_ns - w.started_ns) / 1e6;
        f.durations.observe(ms / 1e3);
        std::string reason;
        if (done) {
          ++f.handovers;
          f.last_ms = ms;
          f.max_ms = std::max(f.max_ms, ms);
        } else {
          reason = pool_wait_shortfall(w, now_ns);
          TANDEM_LOG_WARN("memory policy: {}", f.short_answer(c->pid, reason));
        }
        reply(*c, MessageType::pool_granted,
              msg::encode(msg::PoolGranted{w.given, (w.wanted - w.given) * w.chunk_bytes, reason, w.seq, ms}));
        finished = true;
      }
    }
    if (finished) {
      pool_waits_.erase(pool_waits_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

void Server::give_back_to_training(const std::string& gpu_uuid) {
  if (!pool_waits_.empty()) return;  // inference is still waiting for memory
  uint64_t chunk = pool_chunk_bytes();
  // Free memory counts only for training in the trust domain whose chunks it is.
  std::map<std::string, uint64_t> free_in;
  // Training's quota was lowered only for the others of its trust domain on this GPU: once they
  // hold no chunk (exited, or released what they loaded), all of it goes back, even when the
  // freed chunks were trimmed from the pool already and so are not counted free.
  std::map<std::string, uint64_t> held_by_others;
  for (const auto& [id, c] : registry_.clients())
    if (c.role != "training" && c.gpu == gpu_uuid && !c.closing) held_by_others[c.trust_domain] += pool_.held_by(id);
  for (auto& [id, t] : registry_.clients()) {
    if (t.role != "training" || t.gpu != gpu_uuid || !t.pool_taken_bytes || t.slot < 0) continue;
    auto [it, fresh] = free_in.try_emplace(t.trust_domain, 0);
    if (fresh) it->second = pool_.free_bytes(gpu_uuid, chunk, t.trust_domain);
    uint64_t& free_bytes = it->second;
    uint64_t give = held_by_others[t.trust_domain] ? give_back_bytes(free_bytes, watermark(), chunk, t.pool_taken_bytes)
                                                   : t.pool_taken_bytes;
    if (!give) continue;
    free_bytes -= std::min(free_bytes, give);
    t.pool_taken_bytes -= give;
    uint64_t quota = assigned_quota(t) + give;
    set_quota(t, t.pool_taken_bytes ? quota : t.quota_before_pool);
    TANDEM_LOG_INFO("memory policy: {} MiB back to training pid {}", give >> 20, t.pid);
  }
}

// The process hears of it at once: its progress thread waits on memory_wake between ticks.
void Server::set_quota(Client& client, uint64_t bytes) {
  tandem_slot& slot = gpu(client.gpu)->segment().shm()->slots[client.slot];
  __atomic_store_n(&slot.assigned_quota_bytes, bytes, __ATOMIC_RELEASE);
  futex_bump_and_wake(&slot.memory_wake);
}

uint64_t Server::assigned_quota(const Client& client) {
  return __atomic_load_n(&gpu(client.gpu)->segment().shm()->slots[client.slot].assigned_quota_bytes, __ATOMIC_ACQUIRE);
}

void Server::pool_tick(uint64_t now_ns) {
  std::vector<std::string> freed_on = pool_.reap_orphans();
  if (!freed_on.empty() || !pool_waits_.empty()) serve_pool_waits(now_ns);
  // An exited process's chunks are free: training may have them back.
  for (const std::string& g : freed_on) give_back_to_training(g);
}

std::map<std::pair<std::string, int>, uint64_t> Server::pool_bytes_by_slot() const {
  std::map<std::pair<std::string, int>, uint64_t> bytes;
  for (const auto& [id, c] : registry_.clients())
    if (c.slot >= 0) bytes[{c.gpu, c.slot}] = pool_.held_by(id);
  return bytes;
}

nlohmann::json Server::pool_status(const std::string& gpu_uuid) const {
  MemoryPool::Totals t = pool_.totals(gpu_uuid);
  auto f = pool_figures_.find(gpu_uuid);
  PoolFigures figures = f == pool_figures_.end() ? PoolFigures{} : f->second;
  size_t waits = std::count_if(pool_waits_.begin(), pool_waits_.end(), [&](const PoolWait& w) {
    auto c = registry_.clients().find(w.client);
    return c != registry_.clients().end() && c->second.gpu == gpu_uuid;
  });
  return {{"chunks", t.chunks},         {"bytes", t.bytes},
          {"free_bytes", t.free_bytes}, {"orphaned_bytes", t.orphaned_bytes},
          {"waits", waits},             {"handovers", figures.handovers},
          {"short_answers", figures.short_answers}, {"last_short_answer", figures.last_short},
          {"handover_last_ms", figures.last_ms},
          {"handover_max_ms", figures.max_ms}};
}

}  // namespace tandem::scheduler
