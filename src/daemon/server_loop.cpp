// tandemd's loop: accept, receive, dispatch, reply, disconnect. Its rules:
//  * the tick comes first: each turn handles at most a few messages and bytes per client
//    (daemon_limits.h) and stops dispatching when the tick is due, starting the next turn where it
//    stopped, so one client pipelining requests delays no tick;
//  * only the loop destroys a client: handlers mark a peer closing (reply() does on failure),
//    and reap_closing() disconnects after the turn's handlers ran, so no `Client&` a handler
//    holds can dangle;
//  * no accept() spins: at EMFILE/ENFILE a reserve descriptor sheds the pending connection.
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
#include <exception>
#include <type_traits>
#include <variant>

#include "daemon_limits.h"
#include "grants.h"
#include "log.h"
#include "server.h"

namespace tandem::scheduler {

namespace {

bool make_address(const std::string& path, sockaddr_un& addr) {
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  return true;
}

void make_parent_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return;
  std::string dir = path.substr(0, slash);
  for (size_t p = 1; p <= dir.size(); ++p)
    if (p == dir.size() || dir[p] == '/') mkdir(dir.substr(0, p).c_str(), 0755);
}

int open_reserve_fd() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      registry_(options_.limits.queued_reply_bytes, options_.limits.queued_reply_bytes_total),
      departed_(options_.limits.departed) {}

Server::~Server() {
  for (const auto& [id, client] : registry_.clients()) {
    close(client.fd);
    if (client.pidfd >= 0) close(client.pidfd);
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    socket_owner_.release();
  }
  if (admin_fd_ >= 0) {
    close(admin_fd_);
    admin_owner_.release();
  }
  if (reserve_fd_ >= 0) close(reserve_fd_);
  for (int fd : wake_pipe_)
    if (fd >= 0) close(fd);
}

bool Server::open(std::string& error) {
  sockaddr_un addr;
  if (!make_address(options_.socket_path, addr)) {
    error = "socket path '" + options_.socket_path + "' is empty or too long";
    return false;
  }
  if (!SocketPathOwner::clear_for_bind(options_.socket_path, error)) return false;
  make_parent_dir(options_.socket_path);
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    error = "cannot listen on " + options_.socket_path + ": " + std::strerror(errno);
    return false;
  }
  socket_owner_.claim(options_.socket_path);
  // Owner, group and mode are set before listen(): until then no one can connect.
  if (((options_.socket_owner != static_cast<uid_t>(-1) || options_.socket_group != static_cast<gid_t>(-1)) &&
       chown(options_.socket_path.c_str(), options_.socket_owner, options_.socket_group) != 0) ||
      chmod(options_.socket_path.c_str(), options_.socket_mode) != 0 || listen(listen_fd_, 64) != 0) {
    error = "cannot listen on " + options_.socket_path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  gid_t socket_gid = stat(options_.socket_path.c_str(), &st) == 0 ? st.st_gid : getegid();
  daemon_uid_ = geteuid();
  options_.access.finalize(daemon_uid_, socket_gid);
  if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  reserve_fd_ = open_reserve_fd();
  if (!options_.metrics_address.empty() && !metrics_.open(options_.metrics_address, error)) return false;
  if (!options_.admin_socket.empty()) {
    make_parent_dir(options_.admin_socket);
    if ((admin_fd_ = listen_unix(options_.admin_socket, 0600, error)) < 0) return false;
    admin_owner_.claim(options_.admin_socket);
  }
  // Grants beside the socket unless configured; those recorded there come back (a restart).
  const size_t slash = options_.socket_path.rfind('/');
  grants_.set_dir(!options_.grant_dir.empty() ? options_.grant_dir
                  : slash == std::string::npos ? std::string("grants")
                                               : options_.socket_path.substr(0, slash) + "/grants");
  if (size_t restored = grants_.restore()) TANDEM_LOG_INFO("{} grants opened again from {}", restored, grants_.dir());
  started_ns_ = monotonic_ns();
  TANDEM_LOG_INFO("tandemd listening on {} (policy {}, socket uid {} gid {} mode {:04o}; training: {}; inference: {}; "
                  "batch-inference: {})",
                  options_.socket_path, options_.policy, st.st_uid, socket_gid, options_.socket_mode,
                  options_.access.roles["training"].describe(), options_.access.roles["inference"].describe(),
                  options_.access.roles["batch-inference"].describe());
  if (metrics_.listening()) TANDEM_LOG_INFO("metrics on http://{}/metrics", metrics_.address());
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
  std::vector<pollfd> fds;
  std::vector<ClientId> ids;  // ids[i] polls at fds[i + 2]
  size_t first = 0;           // where this turn's dispatch starts (fairness when cut short)
  while (!stopping_.load()) {
    uint64_t now = monotonic_ns();
    drop_stalled_clients(now);
    reap_closing();
    if (now >= next_tick) {
      if (now >= next_tick + period) ++ticks_late_;
      tick_all(now);
      reap_closing();
      next_tick += period;
      if (next_tick <= now) next_tick = now + period;  // fell behind: do not burst
      continue;
    }
    fds.clear();
    ids.clear();
    bool listening = now >= accept_paused_until_;
    fds.push_back({listening ? listen_fd_ : -1, POLLIN, 0});
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    bool backlog = false;  // some client has a whole message waiting: do not sleep
    for (const auto& [id, c] : registry_.clients()) {
      // A full input buffer is not read further: the socket's buffer pushes back on the sender.
      short events = static_cast<short>((c.in.buffered() < limits::kMaxInputBuffered ? POLLIN : 0) |
                                        (c.out.empty() ? 0 : POLLOUT));
      backlog = backlog || c.in.has_message();
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    const size_t metrics_first = fds.size();  // the metrics endpoint's sockets follow the clients'
    metrics_.add_poll_fds(fds, now);
    // Then the admin socket and the grants' sockets (accepted like the main one).
    const size_t listeners_first = fds.size();
    fds.push_back({listening ? admin_fd_ : -1, POLLIN, 0});
    for (const GrantRecord& g : grants_.all()) fds.push_back({listening ? g.listen_fd : -1, POLLIN, 0});
    const size_t metrics_count = listeners_first - metrics_first;
    uint64_t wait = backlog ? 0 : next_tick - now;
    if (!listening && accept_paused_until_ - now < wait) wait = accept_paused_until_ - now;
    timespec timeout{static_cast<time_t>(wait / 1000000000ull), static_cast<long>(wait % 1000000000ull)};
    int n = ppoll(fds.data(), fds.size(), &timeout, nullptr);
    if (n < 0 && errno != EINTR) {
      TANDEM_LOG_ERROR("poll: {}", std::strerror(errno));
      break;
    }
    if (n < 0) continue;
    if (fds[0].revents & POLLIN) accept_clients(listen_fd_, {}, false);
    if (fds[listeners_first].revents & POLLIN) accept_clients(admin_fd_, {}, true);
    // By name, not by position: a grant accepted into may not be the only change this turn.
    std::vector<std::string> ready;
    for (size_t i = listeners_first + 1; i < fds.size(); ++i)
      if (fds[i].revents & POLLIN) ready.push_back(grants_.all()[i - listeners_first - 1].request.name);
    for (const std::string& name : ready)
      if (const GrantRecord* g = grants_.find(name)) accept_clients(g->listen_fd, name, false);
    metrics_.serve(fds.data() + metrics_first, metrics_count, monotonic_ns(), [this] { return metrics_text(); });
    tick_due_ns_ = next_tick;
    const size_t count = ids.size();
    size_t served = 0;
    for (; served < count; ++served) {
      size_t i = (first + served) % count;
      Client* c = registry_.find(ids[i]);
      if (!c || c->closing || (!fds[i + 2].revents && !c->in.has_message())) continue;
      serve(*c, fds[i + 2].revents);
      if (monotonic_ns() >= next_tick) {  // the tick first; the others start the next turn
        ++served;
        break;
      }
    }
    first = count ? (first + served) % count : 0;
    reap_closing();
  }
}

void Server::accept_clients(int listen_fd, const std::string& grant, bool admin) {
  for (size_t k = 0; k < limits::kMaxAcceptsPerTurn; ++k) {
    // Non-blocking: no write to a client that does not read may ever stall the loop.
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) shed_connection(listen_fd, monotonic_ns());
      return;
    }
    fd_exhaustion_logged_ = false;
    PeerIdentity peer;
    std::string error;
    if (!read_peer_identity(fd, peer, error)) {
      TANDEM_LOG_WARN("refusing a connection: {}", error);
      close(fd);
      continue;
    }
    peer.grant = grant;  // the socket it came through is who it is
    peer.via_admin_socket = admin;
    const ucred cred{peer.pid, peer.uid, peer.gid};
    const DaemonLimits& cap = options_.limits;
    // A grant's clients count against the grant, whatever their uid (root's exemption is for
    // the host's root).
    const size_t of_grant = grant.empty() ? 0 : registry_.clients_of_grant(grant);
    bool too_many = registry_.size() >= cap.connections ||
                    (!grant.empty() && of_grant >= cap.connections_per_uid) ||
                    (grant.empty() && cred.uid != 0 && registry_.connections_of(cred.uid) >= cap.connections_per_uid);
    if (too_many) {
      if (!cap_refusal_logged_)
        TANDEM_LOG_WARN("connection of pid {} uid {} refused: {} clients connected ({} of its uid); caps {} and {} per uid",
                        cred.pid, cred.uid, registry_.size(), registry_.connections_of(cred.uid),
                        cap.connections, cap.connections_per_uid);
      cap_refusal_logged_ = true;
      // A fresh socket's buffer takes the short error: the client learns why.
      send_message(fd, MessageType::error, msg::encode(msg::Error{EUSERS, "too many connections to tandemd"}));
      if (peer.pidfd >= 0) close(peer.pidfd);
      close(fd);
      continue;
    }
    cap_refusal_logged_ = false;
    Client& c = admit(fd, std::move(peer));
    TANDEM_LOG_DEBUG("client connected: pid {} uid {} gid {} cgroup {}", c.pid, c.uid, c.peer.gid,
                     c.peer.container.cgroup);
  }
}

Client& Server::admit(int fd, PeerIdentity&& peer) {
  Client& c = registry_.add(fd, peer.pid, peer.uid, monotonic_ns());
  c.pidfd = peer.pidfd;  // the Client owns it from here
  peer.pidfd = -1;
  c.trust_domain = options_.access.trust_domain(peer);
  c.peer = std::move(peer);
  return c;
}

void Server::shed_connection(int listen_fd, uint64_t now_ns) {
  if (!fd_exhaustion_logged_)
    TANDEM_LOG_WARN("out of file descriptors ({}): new connections are closed at once until some are freed",
                    std::strerror(errno));
  fd_exhaustion_logged_ = true;
  // The listening socket stays readable while the connection waits: accept it with the
  // reserve's number and close it, or the loop would spin on poll.
  if (reserve_fd_ >= 0) {
    close(reserve_fd_);
    reserve_fd_ = -1;
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) close(fd);
    reserve_fd_ = open_reserve_fd();
    if (fd >= 0 && reserve_fd_ >= 0) return;
  }
  accept_paused_until_ = now_ns + limits::kAcceptPauseNs;  // no reserve: look again later
}

void Server::drop_stalled_clients(uint64_t now_ns) {
  for (auto& [id, c] : registry_.clients()) {
    uint64_t since = c.in.partial_since_ns();
    // Whole messages waiting for their turn are the daemon's delay, not the client's.
    if (c.closing || !since || now_ns <= since + limits::kMessageTimeoutNs || c.in.has_message()) continue;
    TANDEM_LOG_WARN("client pid {}: message left incomplete for {} ms; disconnecting", c.pid,
                    limits::kMessageTimeoutNs / 1000000);
    reply_error(c, EPROTO, "message incomplete for too long");
    close_later(c);
  }
}

bool Server::close_later(Client& client) {
  client.closing = true;
  return false;
}

bool Server::reply(Client& client, MessageType type, const std::string& payload) {
  if (client.closing) return false;
  if (!client.out.push(type, payload)) {
    TANDEM_LOG_WARN("client pid {} does not read its replies ({} bytes queued, {} for all clients); disconnecting",
                    client.pid, client.out.queued(), registry_.reply_budget().queued);
    return close_later(client);
  }
  return client.out.flush(client.fd) || close_later(client);
}

bool Server::reply_error(Client& client, int error_number, const std::string& message) {
  return reply(client, MessageType::error, msg::encode(msg::Error{error_number, message}));
}

void Server::reap_closing() {
  std::vector<ClientId> closing;
  for (const auto& [id, c] : registry_.clients())
    if (c.closing) closing.push_back(id);
  for (ClientId id : closing) disconnect(id);
}

void Server::disconnect(ClientId id) {
  Client* c = registry_.find(id);
  if (!c) return;
  std::string gpu_uuid = c->gpu;  // the GPU whose pool may have gained free chunks
  c->out.flush(c->fd);  // a last error reply, if the socket takes it now
  TANDEM_LOG_DEBUG("client pid {} gone", c->pid);
  // What it did is kept before its page goes with the slot (a killed process writes no
  // statistics file).
  record_departure(*c, monotonic_ns());
  // Its slot and unspent tokens are reclaimed at once: the others continue.
  if (c->slot >= 0)
    if (GpuScheduler* g = gpu(c->gpu)) g->segment().release(c->slot);
  for (int passed : c->passed_fds) close(passed);
  // Its pooled chunks become free when the process is gone (now, if it crashed).
  pool_.disconnect(id, c->pidfd);
  std::erase_if(pool_waits_, [id](const PoolWait& w) { return w.client == id; });
  close(c->fd);
  registry_.remove(id);
  if (gpu_uuid.empty()) return;
  // What an exited process held may go back to training's quota (InferRelease, as when it gives it back).
  give_back_to_training(gpu_uuid);
  release_gpu_if_unused(gpu_uuid);
}

void Server::serve(Client& client, short revents) {
  if ((revents & POLLOUT) && !client.out.flush(client.fd)) {
    close_later(client);
    return;
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) && !read_input(client)) {
    close_later(client);
    return;
  }
  handle_messages(client);
}

bool Server::read_input(Client& client) {
  char buffer[65536];
  size_t read_this_turn = 0;
  while (read_this_turn < limits::kMaxReadBytesPerTurn && client.in.buffered() < limits::kMaxInputBuffered) {
    iovec io{buffer, sizeof buffer};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * limits::kMaxPassedFds)];
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(client.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    // Descriptors travel with pool_register (a chunk's fd); at most a few wait at a time.
    for (cmsghdr* c = n >= 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
        client.passed_fds.push_back(passed);
      }
    }
    if (client.passed_fds.size() > limits::kMaxPassedFds || (n >= 0 && (msg.msg_flags & MSG_CTRUNC))) {
      TANDEM_LOG_WARN("client pid {}: more than {} descriptors without pool_register; disconnecting", client.pid,
                      limits::kMaxPassedFds);
      return false;
    }
    if (n == 0) return false;  // closed
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    client.in.append(buffer, static_cast<size_t>(n), monotonic_ns());
    read_this_turn += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < sizeof buffer) break;
  }
  return true;
}

void Server::handle_messages(Client& client) {
  MessageHeader header{};
  std::string payload;
  for (size_t handled = 0; handled < limits::kMaxMessagesPerTurn && !client.closing; ++handled) {
    if (handled && monotonic_ns() >= tick_due_ns_) return;  // the rest after the tick
    switch (client.in.next(header, payload)) {
      case FrameReader::Next::need_more: return;
      case FrameReader::Next::too_large:
        TANDEM_LOG_WARN("client pid {}: payload too large; disconnecting", client.pid);
        reply_error(client, EMSGSIZE, recv_status_name(RecvStatus::too_large));
        close_later(client);
        return;
      case FrameReader::Next::message:
        if (!handle(client, header, payload)) close_later(client);
        break;
    }
  }
}

bool Server::handle(Client& client, const MessageHeader& header, const std::string& payload) {
  // A handler that throws (a failed allocation) answers this client with an error; it must
  // never take the daemon, and everyone else, down.
  try {
    // Decode, then dispatch: a handler sees only a valid message of its type (messages.h).
    msg::Request request;
    msg::Refusal why;
    const bool valid = msg::decode_request(header.type, payload, request, why);
    // A pool_register's descriptor travels with it: taken with the message, valid or not.
    int fd = -1;
    if (header.type == static_cast<uint32_t>(MessageType::pool_register) && !client.passed_fds.empty()) {
      fd = client.passed_fds.front();
      client.passed_fds.pop_front();
    }
    if (!valid) {
      if (fd >= 0) close(fd);
      return reply_error(client, why.error_number, why.message);
    }
    return std::visit(
        [&](const auto& m) -> bool {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, msg::Hello>) return handle_hello(client, m);
          else if constexpr (std::is_same_v<T, msg::TraceRequest>) return handle_trace(client, m);
          else if constexpr (std::is_same_v<T, msg::QuotaRequest>) return handle_quota(client, m);
          else if constexpr (std::is_same_v<T, msg::PoolRegister>) return handle_pool_register(client, m, fd);
          else if constexpr (std::is_same_v<T, msg::PoolAcquire>) return handle_pool_acquire(client, m);
          else if constexpr (std::is_same_v<T, msg::PoolRelease>) return handle_pool_release(client, m);
          else if constexpr (std::is_same_v<T, msg::GrantRequest>) return handle_grant(client, m);
          else {
            static_assert(std::is_same_v<T, msg::StatusRequest>, "a request without a handler");
            return reply(client, MessageType::status_reply, status_json());
          }
        },
        request);
  } catch (const std::exception& e) {
    TANDEM_LOG_WARN("client pid {}: message type {}: {}", client.pid, header.type, e.what());
    return reply_error(client, EINVAL, e.what());
  }
}

}  // namespace tandem::scheduler
