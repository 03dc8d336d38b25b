#include "server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <nlohmann/json.hpp>
#include <vector>

#include "json_fields.h"
#include "log.h"
#include "settings.h"

#ifndef TANDEM_VERSION_STRING
#define TANDEM_VERSION_STRING "0.0.0"
#endif

namespace tandem::scheduler {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// A client that starts a message must finish it within this long; waiting costs the loop
// nothing (reads never block), so it can be generous.
constexpr uint64_t kMessageTimeoutNs = 2000000000ull;

bool make_address(const std::string& path, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  return true;
}

// True when a daemon answers on `path`.
bool daemon_answers(const sockaddr_un& addr) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool live = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return live;
}

void make_parent_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return;
  std::string dir = path.substr(0, slash);
  for (size_t p = 1; p <= dir.size(); ++p)
    if (p == dir.size() || dir[p] == '/') mkdir(dir.substr(0, p).c_str(), 0755);
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() {
  for (const auto& [fd, client] : registry_.clients()) close(fd);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(options_.socket_path.c_str());
  }
  for (int fd : wake_pipe_)
    if (fd >= 0) close(fd);
}

bool Server::open(std::string& error) {
  sockaddr_un addr;
  if (!make_address(options_.socket_path, addr)) {
    error = "socket path '" + options_.socket_path + "' is empty or too long";
    return false;
  }
  if (daemon_answers(addr)) {
    error = "another tandemd is already serving " + options_.socket_path;
    return false;
  }
  make_parent_dir(options_.socket_path);
  unlink(options_.socket_path.c_str());  // a stale socket file from a daemon that died
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      chmod(options_.socket_path.c_str(), 0660) != 0 || listen(listen_fd_, 64) != 0) {
    error = "cannot listen on " + options_.socket_path + ": " + std::strerror(errno);
    return false;
  }
  if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  started_ns_ = monotonic_ns();
  TANDEM_LOG_INFO("tandemd listening on {} (policy {})", options_.socket_path, options_.policy);
  return true;
}

void Server::stop() {
  stopping_.store(true);
  char byte = 1;
  ssize_t ignored = write(wake_pipe_[1], &byte, 1);  // async-signal-safe
  (void)ignored;
}

void Server::run() {
  const uint64_t period = options_.scheduler.period_ns;
  uint64_t next_tick = monotonic_ns() + period;
  while (!stopping_.load()) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    for (const auto& [fd, client] : registry_.clients())
      fds.push_back({fd, static_cast<short>(POLLIN | (client.out.empty() ? 0 : POLLOUT)), 0});
    uint64_t now = monotonic_ns();
    drop_stalled_clients(now);
    if (now >= next_tick) {
      tick_all(now);
      next_tick += period;
      if (next_tick <= now) next_tick = now + period;  // fell behind: do not burst
      continue;
    }
    uint64_t wait = next_tick - now;
    timespec timeout{static_cast<time_t>(wait / 1000000000ull), static_cast<long>(wait % 1000000000ull)};
    int n = ppoll(fds.data(), fds.size(), &timeout, nullptr);
    if (n < 0 && errno != EINTR) {
      TANDEM_LOG_ERROR("poll: {}", std::strerror(errno));
      break;
    }
    if (n <= 0) continue;
    if (fds[0].revents & POLLIN) accept_client();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Client* c = registry_.find(fds[i].fd);
      if (!c) continue;
      bool keep = true;
      if (fds[i].revents & POLLOUT) keep = c->out.flush(c->fd);
      if (keep && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) keep = receive(*c);
      if (!keep) disconnect(fds[i].fd);
    }
  }
}

void Server::accept_client() {
  // Non-blocking: no write to a client that does not read may ever stall the loop.
  int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    close(fd);
    return;
  }
  registry_.add(fd, cred.pid, cred.uid, monotonic_ns());
  TANDEM_LOG_DEBUG("client connected: pid {} uid {}", cred.pid, cred.uid);
}

void Server::drop_stalled_clients(uint64_t now_ns) {
  std::vector<int> stalled;
  for (const auto& [fd, c] : registry_.clients()) {
    uint64_t since = c.in.partial_since_ns();
    if (since && now_ns > since + kMessageTimeoutNs) stalled.push_back(fd);
  }
  for (int fd : stalled) {
    Client* c = registry_.find(fd);
    TANDEM_LOG_WARN("client pid {}: message left incomplete for {} ms; disconnecting", c->pid,
                    kMessageTimeoutNs / 1000000);
    reply_error(*c, EPROTO, "message incomplete for too long");
    disconnect(fd);
  }
}

bool Server::reply(Client& client, MessageType type, const std::string& payload) {
  if (!client.out.push(type, payload)) {
    TANDEM_LOG_WARN("client pid {} does not read its replies; disconnecting", client.pid);
    return false;
  }
  return client.out.flush(client.fd);
}

bool Server::reply_error(Client& client, int error_number, const std::string& message) {
  return reply(client, MessageType::error, error_payload(error_number, message));
}

void Server::disconnect(int fd) {
  std::string pooled_gpu;  // the GPU whose pool may have gained free chunks
  if (Client* c = registry_.find(fd)) {
    pooled_gpu = c->gpu;
    c->out.flush(fd);  // a last error reply, if the socket takes it now
    TANDEM_LOG_DEBUG("client pid {} gone", c->pid);
    // Its slot and unspent tokens are reclaimed at once: the others continue.
    if (c->slot >= 0)
      if (GpuScheduler* g = gpu(c->gpu)) g->segment().release(c->slot);
    for (int passed : c->passed_fds) close(passed);
    // Its pooled chunks become free when the process is gone (now, if it crashed).
    pool_.disconnect(fd, c->pidfd);
    c->pidfd = -1;
    std::erase_if(pool_waits_, [fd](const PoolWait& w) { return w.client == fd; });
  }
  registry_.remove(fd);
  close(fd);
  // What an exited process held may go back to training's quota (InferRelease, as when it gives it back).
  if (!pooled_gpu.empty()) give_back_to_training(pooled_gpu);
}

bool Server::receive(Client& client) {
  char buffer[65536];
  // Descriptors travel with pool_register (a chunk's fd); at most a few wait at a time.
  constexpr size_t kMaxPassedFds = 64;
  for (;;) {
    iovec io{buffer, sizeof buffer};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(client.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
        client.passed_fds.push_back(passed);
      }
    }
    if (client.passed_fds.size() > kMaxPassedFds) {
      TANDEM_LOG_WARN("client pid {}: too many descriptors without pool_register; disconnecting", client.pid);
      return false;
    }
    if (n == 0) return false;  // closed
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    client.in.append(buffer, static_cast<size_t>(n), monotonic_ns());
    if (static_cast<size_t>(n) < sizeof buffer) break;
  }
  MessageHeader header{};
  std::string payload;
  for (;;) {
    switch (client.in.next(header, payload)) {
      case FrameReader::Next::need_more: return true;
      case FrameReader::Next::too_large:
        TANDEM_LOG_WARN("client pid {}: payload too large; disconnecting", client.pid);
        reply_error(client, EMSGSIZE, recv_status_name(RecvStatus::too_large));
        return false;
      case FrameReader::Next::message:
        if (!handle(client, header, payload)) return false;
        break;
    }
  }
}

bool Server::handle(Client& client, const MessageHeader& header, const std::string& payload) {
  // A handler that throws (a JSON field of the wrong type, a failed allocation) answers this
  // client with an error; it must never take the daemon, and everyone else, down.
  try {
    switch (static_cast<MessageType>(header.type)) {
      case MessageType::hello: return handle_hello(client, payload);
      case MessageType::status_request: return reply(client, MessageType::status_reply, status_json());
      case MessageType::trace_request: return handle_trace(client, payload);
      case MessageType::quota_request: return handle_quota(client, payload);
      case MessageType::pool_register: return handle_pool_register(client, payload);
      case MessageType::pool_acquire: return handle_pool_acquire(client, payload);
      case MessageType::pool_release: return handle_pool_release(client, payload);
      default:
        return reply_error(client, EBADMSG, "unknown message type " + std::to_string(header.type));
    }
  } catch (const std::exception& e) {
    TANDEM_LOG_WARN("client pid {}: message type {}: {}", client.pid, header.type, e.what());
    return reply_error(client, EINVAL, e.what());
  }
}

bool Server::handle_hello(Client& client, const std::string& payload) {
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer())
    return reply_error(client, EINVAL, "hello needs a JSON object with an integer pid");
  if (j["pid"].get<long>() != client.pid)
    return reply_error(client, EPERM, "a client may act only for its own pid (" + std::to_string(client.pid) + ")");
  std::string role = j.value("role", std::string("none"));
  if (role != "none" && role != "training" && role != "inference" && role != "batch-inference")
    return reply_error(client, EINVAL, "unknown role '" + role + "'");
  std::string uuid = j.value("gpu", std::string());
  std::optional<uint64_t> total = uint_field(j, "gpu_total_bytes");
  if (!total) return reply_error(client, EINVAL, "gpu_total_bytes must be an unsigned integer");
  if (client.registered) return reply_error(client, EALREADY, "already registered");
  if (!client.out.empty()) return reply_error(client, EAGAIN, "read the replies already sent before saying hello");
  if (role == "none" || uuid.empty()) {
    client.role = role;
    client.registered = true;
    return reply(client, MessageType::hello_ok, nlohmann::json{{"slot", -1}}.dump());
  }
  if (uuid.size() != 32 || uuid.find_first_not_of("0123456789abcdef") != std::string::npos)
    return reply_error(client, EINVAL, "gpu must be a 32-digit lowercase hex UUID");
  GpuScheduler* g = gpu(uuid);
  uint32_t code = role == "training" ? TANDEM_ROLE_TRAINING
                  : role == "inference" ? TANDEM_ROLE_INFERENCE : TANDEM_ROLE_BATCH_INFERENCE;
  int slot = g && g->segment().ok() ? g->segment().claim(client.pid, code) : -1;
  if (slot >= 0) client.pidfd = static_cast<int>(syscall(SYS_pidfd_open, client.pid, 0));
  if (slot < 0) return reply_error(client, ENOSPC, "no free client slot on GPU " + uuid);
  client.role = role;
  client.registered = true;  // only now: a refused hello may be retried
  client.gpu = uuid;
  client.slot = slot;
  if (*total && !g->segment().shm()->gpu_total_bytes) g->segment().shm()->gpu_total_bytes = *total;
  TANDEM_LOG_INFO("pid {} registered as {} on GPU {} (slot {})", client.pid, role, uuid, slot);
  nlohmann::json ok = {{"slot", slot}, {"sample_us", options_.scheduler.period_ns / 1000}};
  // The descriptor needs its own sendmsg: sent directly, after every queued reply (checked
  // above), on the non-blocking socket; a client whose socket cannot take it is dropped.
  return send_message_with_fd(client.fd, MessageType::hello_ok, ok.dump(), g->segment().fd());
}

bool Server::handle_trace(Client& client, const std::string& payload) {
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  std::optional<uint64_t> since = uint_field(j, "since_ns");
  if (!since) return reply_error(client, EINVAL, "since_ns must be an unsigned integer");
  nlohmann::json gpus = nlohmann::json::object();
  for (auto& [uuid, g] : gpus_) gpus[uuid] = nlohmann::json::parse(g->trace().chrome_json(*since, uuid.substr(0, 8)));
  return reply(client, MessageType::trace_reply, nlohmann::json{{"now_ns", monotonic_ns()}, {"gpus", gpus}}.dump());
}

// Sets (or clears) a registered process's memory quota. Its library reads the slot at each
// allocation, so the quota holds from the next one; memory already held is not taken back.
// Only root or the process's own user may change it.
bool Server::handle_quota(Client& client, const std::string& payload) {
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() ||
      !j.contains("size") || !j["size"].is_string())
    return reply_error(client, EINVAL, "a quota request needs {\"pid\": int, \"size\": str}");
  long pid = j["pid"].get<long>();
  std::string text = j["size"].get<std::string>();
  MemorySize size;
  if (!parse_memory_size(text.c_str(), size))
    return reply_error(client, EINVAL, "size '" + text + "': give bytes with a K/M/G/T suffix, or N% of the GPU");
  for (const auto& [fd, c] : registry_.clients()) {
    if (c.pid != pid || c.slot < 0) continue;
    if (client.uid != 0 && client.uid != c.uid)
      return reply_error(client, EPERM, "only root or uid " + std::to_string(c.uid) + " may set the quota of pid " +
                                              std::to_string(pid));
    GpuScheduler* g = gpu(c.gpu);
    tandem_shm_header* shm = g->segment().shm();
    uint64_t bytes = memory_size_bytes(size, shm->gpu_total_bytes);
    if (size.is_percent && !shm->gpu_total_bytes)
      return reply_error(client, EAGAIN, "the size of GPU " + c.gpu + " is not known yet; give bytes");
    __atomic_store_n(&shm->slots[c.slot].assigned_quota_bytes, bytes, __ATOMIC_RELEASE);
    TANDEM_LOG_INFO("memory quota of pid {} set to {} bytes by pid {}", pid, bytes, client.pid);
    return reply(client, MessageType::quota_reply,
                        nlohmann::json{{"pid", pid}, {"bytes", bytes}, {"gpu", c.gpu}}.dump());
  }
  return reply_error(client, ESRCH, "pid " + std::to_string(pid) + " is not a registered client with a GPU");
}

GpuScheduler* Server::gpu(const std::string& uuid) {
  auto it = gpus_.find(uuid);
  if (it != gpus_.end()) return it->second.get();
  auto g = std::make_unique<GpuScheduler>(uuid, options_.scheduler);
  GpuScheduler* raw = g.get();
  gpus_[uuid] = std::move(g);
  return raw;
}

void Server::tick_all(uint64_t now_ns) {
  for (auto& [uuid, g] : gpus_) g->tick(now_ns);
  pool_tick(now_ns);
}

std::string Server::status_json() const {
  uint64_t now = monotonic_ns();
  nlohmann::json clients = nlohmann::json::array();
  for (const auto& [fd, c] : registry_.clients()) {
    if (!c.registered) continue;
    clients.push_back({{"pid", c.pid}, {"uid", c.uid}, {"role", c.role},
                       {"connected_s", static_cast<double>(now - c.connected_ns) / 1e9}});
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& [uuid, g] : gpus_) {
    const BubbleDetector& d = g->detector();
    nlohmann::json slots = nlohmann::json::array();
    const tandem_shm_header* shm = const_cast<GpuScheduler&>(*g).segment().shm();
    for (uint32_t i = 0; shm && i < TANDEM_MAX_SLOTS; ++i) {
      const tandem_slot& s = shm->slots[i];
      if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) continue;
      slots.push_back({{"slot", i}, {"pid", s.pid}, {"launches", s.launches}, {"nccl_launches", s.nccl_launches},
                       {"tokens_ns", s.tokens}, {"granted_ns", s.granted_ns}, {"issued_ns", s.issued_ns},
                       {"completed_ns", s.completed_ns}, {"markers_pending", s.markers_recorded - s.markers_completed},
                       {"gate", s.gate == TANDEM_GATE_OPEN ? "open" : "tokens"}, {"gate_waits", s.gate_waits},
                       {"gate_wait_ms", static_cast<double>(s.gate_wait_ns) / 1e6},
                       {"requests", s.requests}, {"request_ms", static_cast<double>(s.request_ns) / 1e6},
                       {"admission_waits", s.admission_waits}, {"peak_mib", static_cast<double>(s.peak_bytes) / 1048576.0},
                       {"admission_wait_ms", static_cast<double>(s.admission_wait_ns) / 1e6},
                       {"bytes_in_use", s.bytes_in_use}, {"peak_bytes", s.peak_bytes},
                       {"quota_bytes", s.quota_bytes}, {"assigned_quota_bytes", s.assigned_quota_bytes},
                       {"quota_refusals", s.quota_refusals}, {"requests_open", s.requests_open},
                       {"latency_ms", static_cast<double>(s.latency_ns) / 1e6}, {"latency_samples", s.latency_samples},
                       {"slo_ms", s.slo_us / 1e3}, {"pool_bytes", pool_bytes_of(uuid, i)}});
    }
    nlohmann::json slo = nullptr;
    if (g->policy() == TANDEM_POLICY_SLO) {
      const SloPolicy& p = g->slo();
      nlohmann::json history = nlohmann::json::array();
      for (const ControlRecord& r : p.history())
        history.push_back({{"t_s", static_cast<double>(r.t_ns - started_ns_) / 1e9}, {"latency_ms", r.latency_ms},
                           {"target_ms", r.target_ms}, {"duty", r.duty}, {"samples", r.samples}, {"active", r.active}});
      slo = {{"active", p.active()}, {"duty", p.duty()}, {"gain_estimate", p.controller().gain_estimate()},
             {"saturated", p.controller().saturated()}, {"inflight_bound_ms", static_cast<double>(p.inflight_bound_ns()) / 1e6},
             {"control_periods", p.control_seq() - 1}, {"history", history}};
    }
    gpus.push_back({{"uuid", uuid},
                    {"phase", g->gpu_phase() == GpuPhase::bubble ? "bubble" : "busy"},
                    {"fill_phase", FillPolicy::phase_name(g->fill_phase())},
                    {"communicating", g->communicating()},
                    {"bubbles", d.bubbles()},
                    {"mean_bubble_ms", static_cast<double>(d.mean_bubble_ns()) / 1e6},
                    {"mean_busy_ms", static_cast<double>(d.mean_busy_ns()) / 1e6},
                    {"longest_bubble_ms", static_cast<double>(d.longest_bubble_ns()) / 1e6},
                    {"admission_refused", g->refusals()},
                    {"slo", slo},
                    {"pool", pool_status(uuid)},
                    {"slots", slots}});
  }
  nlohmann::json j = {{"gpus", gpus},
                      {"daemon",
                       {{"pid", getpid()},
                        {"version", TANDEM_VERSION_STRING},
                        {"policy", options_.policy},
                        {"socket", options_.socket_path},
                        {"uptime_s", static_cast<double>(now - started_ns_) / 1e9}}},
                      {"clients", clients}};
  return j.dump();
}

}  // namespace tandem::scheduler
