#include "server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <vector>

#include "capacity_status.h"
#include "daemon_limits.h"
#include "futex.h"
#include "gpu_admission.h"
#include "json_text.h"
#include "log.h"
#include "settings.h"
#include "slo_status.h"
#include "slot_config.h"
#include "trace_json.h"

#ifndef TANDEM_VERSION_STRING
#define TANDEM_VERSION_STRING "0.0.0"
#endif

namespace tandem::scheduler {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool Server::handle_hello(Client& client, const msg::Hello& hello) {
  // The identity is the connection's (SO_PEERCRED); the hello's pid is the client's own view,
  // which differs in a container's PID namespace, and is ignored.
  std::string role = hello.role;
  const std::string& uuid = hello.gpu;
  if (client.registered) return reply_error(client, EALREADY, "already registered");
  if (!client.out.empty()) return reply_error(client, EAGAIN, "read the replies already sent before saying hello");
  // A grant's client is registered in the grant's role on the grant's GPU, whatever it asks:
  // asking for a protected role gets it gated as its slot's role, never refused and ungated.
  const GrantRecord* grant = client.peer.grant.empty() ? nullptr : grants_.find(client.peer.grant);
  if (!client.peer.grant.empty() && !grant) return reply_error(client, ENOENT, "grant " + client.peer.grant + " was revoked");
  if (grant && !uuid.empty()) {
    const std::vector<std::string>& gpus = grant->request.gpus;
    if (std::find(gpus.begin(), gpus.end(), uuid) == gpus.end())
      return reply_error(client, EACCES, "grant " + grant->request.name + " is not for GPU " + uuid);
    if (role != grant->request.role)
      TANDEM_LOG_INFO("pid {} of grant {} asked for role {}: registered as the grant's {}", client.pid,
                      grant->request.name, role, grant->request.role);
    role = grant->request.role;
  } else if (grant) {
    role = "none";  // no GPU named: it only talks to tandemd
  }
  if (std::string why = grant ? std::string() : options_.access.refusal(client.peer, role); !why.empty()) {
    TANDEM_LOG_INFO("pid {} uid {}: {}", client.pid, client.uid, why);
    return reply_error(client, EACCES, why);
  }
  if (role == "none" || uuid.empty()) {
    client.role = role;
    client.registered = true;
    return reply(client, MessageType::hello_ok, msg::encode(msg::HelloOk{}));
  }
  if (client.pid <= 0 || client.pidfd < 0)
    return reply_error(client, EPERM, "tandemd cannot see this process (a PID namespace outside its own)");
  if (uint32_t cap = options_.access.slot_cap(client.peer, daemon_uid_)) {
    // A grant's processes count together, a user's outside grants together.
    auto same_holder = [&](const Client& c) {
      return grant ? c.peer.grant == client.peer.grant : c.peer.grant.empty() && c.uid == client.uid;
    };
    uint32_t held = static_cast<uint32_t>(std::count_if(registry_.clients().begin(), registry_.clients().end(),
        [&](const auto& e) { return same_holder(e.second) && e.second.gpu == uuid && e.second.slot >= 0; }));
    if (held >= cap)
      return reply_error(client, EDQUOT, (grant ? "grant " + grant->request.name : "uid " + std::to_string(client.uid)) +
                                             " already holds " + std::to_string(held) + " slots on GPU " + uuid +
                                             " (max_slots_per_user; docs/security.md)");
  }
  GpuGrant granted = admit_gpu(client, uuid);  // only GPUs that exist take state (gpu_admission.h)
  if (!granted.gpu) return reply_error(client, granted.error, granted.why);
  GpuScheduler* g = granted.gpu;
  int slot = g && g->segment().ok() ? g->segment().claim(client.pid, msg::role_code(role)) : -1;
  if (slot < 0) {
    release_gpu_if_unused(uuid);
    return reply_error(client, ENOSPC, "no free client slot on GPU " + uuid);
  }
  g->admitted(slot);
  client.role = role;
  client.registered = true;  // only now: a refused hello may be retried
  client.gpu = uuid;
  client.slot = slot;
  if (!hello.job.empty()) {
    // Only ranks of one user form a job: another user's process cannot hold (or release) it.
    client.job = std::to_string(client.uid) + "/" + hello.job;
    client.job_ranks = static_cast<uint32_t>(hello.job_ranks);
  }
  // The GPU's size (for N% quotas and the admission check) comes from a client: the first
  // report is kept, except that one from a client trusted with a protected role replaces one
  // from a client that is not (a user let in only as a filler cannot skew others' quotas).
  bool trusted = options_.access.refusal(client.peer, "training").empty() ||
                 options_.access.refusal(client.peer, "inference").empty();
  bool& known_trusted = gpu_total_trusted_[uuid];
  if (hello.gpu_total_bytes && (!g->segment().shm()->gpu_total_bytes || (trusted && !known_trusted))) {
    g->segment().shm()->gpu_total_bytes = hello.gpu_total_bytes;
    known_trusted = trusted;
  }
  // A grant's memory limit is its quota, set here: the process's own TANDEM_MEM_LIMIT cannot
  // raise it (the assigned quota overrides it).
  if (grant && !grant->request.memory_limit.empty()) {
    tandem_shm_header* shm = g->segment().shm();
    __atomic_store_n(&shm->slots[slot].assigned_quota_bytes,
                     memory_size_bytes(grant->request.parsed_limit, shm->gpu_total_bytes), __ATOMIC_RELEASE);
  }
  TANDEM_LOG_INFO("pid {} registered as {} on GPU {} (slot {}{}{})", client.pid, role, uuid, slot,
                  grant ? ", grant " : "", grant ? grant->request.name : "");
  const msg::HelloOk ok{slot, options_.scheduler.period_ns / 1000, role};
  // The descriptors (the GPU's sealed, read-only segment, then the client's own page) need
  // their own sendmsg: sent directly, after every queued reply (checked above), on the
  // non-blocking socket; a client whose socket cannot take them is dropped.
  const int fds[2] = {g->segment().fd(), g->segment().page_fd(slot)};
  return send_message_with_fds(client.fd, MessageType::hello_ok, msg::encode(ok), fds, 2);
}

bool Server::handle_trace(Client& client, const msg::TraceRequest& request) {
  nlohmann::json gpus = nlohmann::json::object();
  for (auto& [uuid, g] : gpus_) gpus[uuid] = chrome_trace(g->trace(), request.since_ns, uuid.substr(0, 8));
  return reply(client, MessageType::trace_reply, json_text(nlohmann::json{{"now_ns", monotonic_ns()}, {"gpus", gpus}}));
}

// Sets (or clears) a registered process's memory quota. Its library reads the slot at each
// allocation, so the quota holds from the next one; memory already held is not taken back.
// Only the process's own user or a quota admin (root and tandemd's uid unless configured) may.
bool Server::handle_quota(Client& client, const msg::QuotaRequest& request) {
  const int64_t pid = request.pid;
  const MemorySize& size = request.parsed;
  for (const auto& [fd, c] : registry_.clients()) {
    if (c.pid != pid || c.slot < 0) continue;
    if (std::string why = options_.access.quota_refusal(client.peer, c.peer); !why.empty())
      return reply_error(client, EPERM, "pid " + std::to_string(pid) + ": " + why);
    GpuScheduler* g = gpu(c.gpu);
    tandem_shm_header* shm = g->segment().shm();
    uint64_t bytes = memory_size_bytes(size, shm->gpu_total_bytes);
    if (size.is_percent && !shm->gpu_total_bytes)
      return reply_error(client, EAGAIN, "the size of GPU " + c.gpu + " is not known yet; give bytes");
    __atomic_store_n(&shm->slots[c.slot].assigned_quota_bytes, bytes, __ATOMIC_RELEASE);
    futex_bump_and_wake(&shm->slots[c.slot].memory_wake);  // a lowered quota is answered at once
    TANDEM_LOG_INFO("memory quota of pid {} set to {} bytes by pid {}", pid, bytes, client.pid);
    return reply(client, MessageType::quota_reply, msg::encode(msg::QuotaReply{pid, bytes, c.gpu}));
  }
  return reply_error(client, ESRCH, "pid " + std::to_string(pid) + " is not a registered client with a GPU");
}

nlohmann::json Server::grants_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const GrantRecord& g : grants_.all()) {
    const size_t clients = registry_.clients_of_grant(g.request.name);
    out.push_back({{"name", g.request.name}, {"role", g.request.role}, {"gpus", g.request.gpus},
                   {"memory_limit", g.request.memory_limit}, {"socket", g.socket_path}, {"clients", clients}});
  }
  return out;
}

bool Server::node_admin(const PeerIdentity& peer) const {
  if (!peer.grant.empty()) return false;
  return peer.via_admin_socket || (peer.host_namespaces && (peer.uid == 0 || peer.uid == daemon_uid_));
}

// Creates a grant (or states it again): its socket, for the device plugin to mount into the
// allocation's container. At the cap the oldest grant no process is connected through gives way.
bool Server::handle_grant(Client& client, const msg::GrantRequest& request) {
  if (!node_admin(client.peer))
    return reply_error(client, EPERM, "only tandemd's node administrators (its admin socket; root or tandemd's uid "
                                      "in tandemd's namespaces) may create grants");
  if (!grants_.find(request.name) && grants_.size() >= GrantTable::kMaxGrants) {
    const GrantRecord* oldest = nullptr;
    for (const GrantRecord& g : grants_.all()) {
      if (!registry_.clients_of_grant(g.request.name) && (!oldest || g.created_seq < oldest->created_seq)) oldest = &g;
    }
    if (oldest) {
      TANDEM_LOG_INFO("grant {} removed, the oldest unused, for grant {}", oldest->request.name, request.name);
      grants_.remove(std::string(oldest->request.name));
    }
  }
  std::string error;
  const GrantRecord* g = grants_.put(request, error);
  if (!g) return reply_error(client, ENOSPC, error);
  TANDEM_LOG_INFO("grant {}: {} on GPU {}{}, memory {}, at {}", request.name, request.role, request.gpus.front(),
                  request.gpus.size() > 1 ? " and others" : "",
                  request.memory_limit.empty() ? "unlimited" : request.memory_limit, g->socket_path);
  return reply(client, MessageType::grant_reply, msg::encode(msg::GrantReply{g->request.name, g->socket_path}));
}

GpuScheduler* Server::gpu(const std::string& uuid) {
  auto it = gpus_.find(uuid);
  return it == gpus_.end() ? nullptr : it->second.get();
}

Server::GpuGrant Server::admit_gpu(const Client& client, const std::string& uuid) {
  // A protected client is one handle_hello calls `trusted`: the policy would let it register
  // as training or inference, whatever role it asked for.
  const bool protected_client = options_.access.refusal(client.peer, "training").empty() ||
                                options_.access.refusal(client.peer, "inference").empty();
  std::map<std::string, GpuTableEntry> table;
  for (const auto& [id, g] : gpus_) table[id].verified = verified_gpus_.count(id) != 0;
  for (const auto& [id, c] : registry_.clients())
    if (auto it = table.find(c.gpu); it != table.end()) it->second.users.insert(c.uid);
  GpuAdmission a = decide_gpu_admission(table, uuid, client.uid, protected_client, options_.limits);
  if (!a.admit) {
    // Debug only: libtandem retries a refused GPU every second, and each retry would log.
    TANDEM_LOG_DEBUG("pid {} uid {}: {}", client.pid, client.uid, a.why);
    return {nullptr, a.error, a.why};
  }
  if (!a.evict.empty()) {
    // Made-up UUIDs must not pin the table: a GPU no client refers to gives up its place
    // (and its pool chunks, which no process on it is left to use).
    TANDEM_LOG_WARN("{} GPUs tracked: GPU {} (no client) forgotten, with its pool chunks, for GPU {}", gpus_.size(),
                    a.evict, uuid);
    forget_gpu(a.evict);
  }
  if (a.verify) verified_gpus_.insert(uuid);
  if (GpuScheduler* g = gpu(uuid)) return {g};
  auto g = std::make_unique<GpuScheduler>(uuid, options_.scheduler);
  GpuScheduler* raw = g.get();
  gpus_[uuid] = std::move(g);
  return {raw};
}

void Server::forget_gpu(const std::string& uuid) {
  pool_.forget_gpu(uuid);
  pool_figures_.erase(uuid);
  verified_gpus_.erase(uuid);
  // A new state for this UUID starts without a size, so whoever reported the old one no longer counts.
  gpu_total_trusted_.erase(uuid);
  gpus_.erase(uuid);
}

void Server::release_gpu_if_unused(const std::string& uuid) {
  if (!gpus_.count(uuid) || registry_.clients_on(uuid) || pool_.has_chunks_on(uuid)) return;
  forget_gpu(uuid);  // no chunk on it: nothing of the pool's is given up
}

Server::Holdings Server::holdings() const {
  Holdings h;
  h.clients = registry_.size();
  h.gpus = gpus_.size();
  h.pool_chunks = pool_.size();
  h.orphan_processes = pool_.orphan_processes();
  h.reply_bytes = registry_.reply_budget().queued;
  for (const auto& [id, c] : registry_.clients()) h.passed_fds += c.passed_fds.size();
  return h;
}

double Server::node_pressure() const {
  double most = 0;
  for (const auto& [uuid, g] : gpus_) most = std::max(most, g->capacity().pressure());
  return most;
}

void Server::tick_all(uint64_t now_ns) {
  for (auto& [uuid, g] : gpus_) g->tick(now_ns);
  hold_collectives();
  pool_tick(now_ns);
  tick_seconds_.observe(static_cast<double>(monotonic_ns() - now_ns) / 1e9);
}

std::string Server::status_json() const {
  uint64_t now = monotonic_ns();
  nlohmann::json clients = nlohmann::json::array();
  for (const auto& [fd, c] : registry_.clients()) {
    if (!c.registered) continue;
    const ContainerId& k = c.peer.container;
    const char* pidfd = c.pidfd < 0 ? "none" : c.peer.pidfd_from_peer ? "SO_PEERPIDFD" : "pidfd_open";
    clients.push_back({{"pid", c.pid}, {"uid", c.uid}, {"gid", c.peer.gid}, {"role", c.role},
                       {"container", {{"runtime", k.runtime}, {"id", k.id}, {"pod", k.pod}, {"cgroup", k.cgroup}}},
                       {"trust_domain", c.trust_domain}, {"pidfd", pidfd}, {"grant", c.peer.grant},
                       {"host_namespaces", c.peer.host_namespaces},
                       {"connected_s", static_cast<double>(now - c.connected_ns) / 1e9}});
  }
  const auto pooled = pool_bytes_by_slot();
  auto pooled_bytes = [&](const std::string& uuid, uint32_t slot) {
    auto it = pooled.find({uuid, static_cast<int>(slot)});
    return it == pooled.end() ? uint64_t{0} : it->second;
  };
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& [uuid, g] : gpus_) {
    const BubbleDetector& d = g->detector();
    nlohmann::json slots = nlohmann::json::array();
    const GpuSegment& segment = const_cast<GpuScheduler&>(*g).segment();
    const tandem_shm_header* shm = segment.shm();
    for (uint32_t i = 0; shm && i < TANDEM_MAX_SLOTS; ++i) {
      const tandem_slot& s = shm->slots[i];
      if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) continue;
      // The client's figures as the daemon last read them, bounded (client_view.h).
      const ClientView& view = segment.view(static_cast<int>(i));
      const tandem_client_page& c = view.v;
      slots.push_back({{"slot", i}, {"pid", s.pid}, {"launches", c.launches}, {"nccl_launches", c.nccl_launches},
                       {"collectives_launched", c.collectives_launched}, {"collective_waiting", c.collective_waiting},
                       {"collectives_allowed", s.collectives_allowed},
                       {"mps_client", (c.training_flags & TANDEM_TRAINING_MPS) != 0},
                       {"live_partitions", live_partitions(c)}, {"live_partition", s.live_partition},
                       {"tokens_ns", static_cast<int64_t>(s.token_limit_ns - c.tokens_taken_ns)},
                       {"granted_ns", s.granted_ns}, {"issued_ns", c.issued_ns},
                       {"completed_ns", c.completed_ns}, {"markers_pending", c.markers_recorded - c.markers_completed},
                       {"gate", s.gate == TANDEM_GATE_OPEN ? "open" : "tokens"}, {"gate_waits", c.gate_waits},
                       {"gate_wait_ms", static_cast<double>(c.gate_wait_ns) / 1e6},
                       {"gate_want_ms", c.gate_want_us / 1e3},
                       {"inflight_fail_opens", c.inflight_fail_opens},
                       {"requests", c.requests}, {"request_ms", static_cast<double>(c.request_ns) / 1e6},
                       {"request_blocks", c.request_blocks},
                       {"admission_waits", c.admission_waits}, {"peak_mib", static_cast<double>(c.peak_bytes) / 1048576.0},
                       {"admission_wait_ms", static_cast<double>(c.admission_wait_ns) / 1e6},
                       {"bytes_in_use", c.bytes_in_use}, {"peak_bytes", c.peak_bytes},
                       {"working_set_bytes", c.working_set_bytes}, {"memory_elastic", c.memory_elastic != 0},
                       {"quota_bytes", c.quota_bytes}, {"assigned_quota_bytes", s.assigned_quota_bytes},
                       {"quota_refusals", c.quota_refusals}, {"requests_open", c.requests_open},
                       {"latency_ms", static_cast<double>(c.latency_ns) / 1e6}, {"latency_samples", c.latency_samples},
                       {"slo_ms", c.slo_us / 1e3}, {"pool_bytes", pooled_bytes(uuid, i)},
                       {"page_violations", view.violations},
                       {"page_violation_last", view.last_violation ? view.last_violation : ""}});
    }
    nlohmann::json slo = nullptr;
    if (g->policy() == TANDEM_POLICY_SLO) {
      const SloPolicy& p = g->slo();
      nlohmann::json history = nlohmann::json::array();
      for (const ControlRecord& r : p.history())
        history.push_back({{"t_s", static_cast<double>(r.t_ns - started_ns_) / 1e9}, {"latency_ms", r.latency_ms},
                           {"target_ms", r.target_ms}, {"duty", r.duty}, {"samples", r.samples}, {"active", r.active},
                           {"partition", r.partition}});
      const RequestHolds& holds = g->request_holds();
      slo = {{"active", p.active()}, {"duty", p.duty()}, {"gain_estimate", p.controller().gain_estimate()},
             {"saturated", p.controller().saturated()}, {"inflight_bound_ms", static_cast<double>(p.inflight_bound_ns()) / 1e6},
             {"control_periods", p.control_seq() - 1}, {"history", history},
             {"request_holds",  // who may hold training, for how long (request_holds.h, docs/security.md)
              {{"floor", holds.params().floor}, {"window_s", static_cast<double>(holds.params().window_ns) / 1e9},
               {"stuck", holds.stuck()}, {"refused_ms", static_cast<double>(holds.refused_ns()) / 1e6}}}};
      slo.update(slo_floor_status(*g, p));
    }
    nlohmann::json zico = nullptr;  // TANDEM_ZICO: each training job's curve and permits (docs/zico.md)
    if (const ZicoPolicy* z = g->zico(); z && shm) {
      nlohmann::json jobs = nlohmann::json::array();
      for (const ZicoJobStatus& j : z->status())
        jobs.push_back({{"pid", shm->slots[j.slot].pid}, {"learned", j.learned}, {"profiling", j.profiling},
                        {"unshaped", j.unshaped}, {"waiting", j.waiting}, {"iterations", j.iterations},
                        {"trough_bytes", j.trough_bytes}, {"peak_bytes", j.peak_bytes},
                        {"period_ms", static_cast<double>(j.period_ns) / 1e6},
                        {"active_ms", static_cast<double>(j.active_ns) / 1e6}, {"starts", j.grants},
                        {"delayed_starts", j.shifted}, {"last_shift_ms", static_cast<double>(j.last_shift_ns) / 1e6},
                        {"unpermitted_starts", j.unpermitted}, {"unruly", j.unruly}});
      zico = {{"budget_bytes", g->zico_budget_bytes()}, {"jobs", jobs},
              {"newcomers_held_ms", static_cast<double>(z->profile_hold_ns()) / 1e6}};
    }
    gpus.push_back({{"uuid", uuid},
                    {"verified", verified_gpus_.count(uuid) != 0},  // a protected client named it (gpu_admission.h)
                    {"zico", zico},
                    {"phase", g->gpu_phase() == GpuPhase::bubble ? "bubble" : "busy"},
                    {"fill_phase", FillPolicy::phase_name(g->fill_phase())},
                    {"communicating", g->communicating()},
                    {"receiving", g->receiving()},
                    {"bubbles", d.bubbles()},
                    {"mean_bubble_ms", static_cast<double>(d.mean_bubble_ns()) / 1e6},
                    {"mean_busy_ms", static_cast<double>(d.mean_busy_ns()) / 1e6},
                    {"longest_bubble_ms", static_cast<double>(d.longest_bubble_ns()) / 1e6},
                    {"admission_refused", g->refusals()},
                    // Policy fill: online requests' holds of training (TANDEM_FILL_ONLINE_HOLD)
                    {"online_holds", g->policy() == TANDEM_POLICY_SLO ? nlohmann::json(nullptr)
                                     : nlohmann::json{{"part", g->fill_online_hold()},
                                                      {"refused_ms", static_cast<double>(g->request_holds().refused_ns()) / 1e6},
                                                      {"horizon_ms", static_cast<double>(g->hold_horizon().horizon_ns()) / 1e6}}},
                    {"slo", slo},
                    {"pool", pool_status(uuid)},
                    {"capacity", capacity_status(*g)},
                    {"slots", slots}});
  }
  Holdings held = holdings();
  nlohmann::json j = {{"gpus", gpus},
                      {"daemon",
                       {{"pid", getpid()},
                        {"version", TANDEM_VERSION_STRING},
                        {"policy", options_.policy},
                        {"socket", options_.socket_path},
                        {"uptime_s", static_cast<double>(now - started_ns_) / 1e9},
                        {"metrics", metrics_.address()},
                        {"pressure", node_pressure()},
                        {"kubernetes_slots", slot_config_json(options_.scheduler.slots)},
                        {"holds",
                         {{"clients", held.clients}, {"gpus", held.gpus}, {"pool_chunks", held.pool_chunks},
                          {"passed_fds", held.passed_fds}, {"orphan_processes", held.orphan_processes},
                          {"reply_bytes", held.reply_bytes}}}}},
                      {"clients", clients}, {"grants", grants_json()},
                      {"jobs", jobs_json()},
                      {"departed", departed_json(now)}};  // the most recent first (departed.h)
  return json_text(j);
}

}  // namespace tandem::scheduler
