#include "metrics_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "log.h"

namespace tandem::scheduler {

HttpRequest parse_http_request(std::string_view bytes) {
  HttpRequest r;
  size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos) end = bytes.find("\n\n");
  size_t line_end = bytes.find('\n');
  if (line_end == std::string_view::npos || end == std::string_view::npos) return r;  // incomplete
  std::string_view line = bytes.substr(0, line_end);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // METHOD SP TARGET SP HTTP/1.x, nothing else.
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || sp2 == sp1 + 1 || line.find(' ', sp2 + 1) != std::string_view::npos ||
      line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    r.state = HttpRequest::State::bad;
    return r;
  }
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.method = std::string(line.substr(0, sp1));
  r.path = std::string(target.substr(0, target.find('?')));
  r.state = HttpRequest::State::complete;
  return r;
}

bool split_host_port(const std::string& text, std::string& host, std::string& port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  host = text.substr(0, colon);
  port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string::npos) return false;  // an IPv6 address needs brackets
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  return std::stoul(port) <= 65535;
}

MetricsHttp::~MetricsHttp() {
  for (Connection& c : connections_) close_connection(c);
  if (listen_fd_ >= 0) close(listen_fd_);
}

namespace {
std::string describe_address(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
    port = ntohs(v4.sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
  inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
  port = ntohs(v6.sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}
}  // namespace

bool MetricsHttp::open(const std::string& host_port, std::string& error) {
  std::string host, port;
  if (!split_host_port(host_port, host, port)) {
    error = "metrics address '" + host_port + "' is not HOST:PORT (e.g. 127.0.0.1:9433, [::1]:9433, :9433)";
    return false;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    error = "metrics address '" + host_port + "': " + gai_strerror(rc);
    return false;
  }
  // An empty host means every interface: prefer IPv6's, which takes IPv4 too unless the
  // system says otherwise.
  std::vector<addrinfo*> order;
  for (addrinfo* a = found; a; a = a->ai_next) order.push_back(a);
  if (host.empty())
    std::stable_sort(order.begin(), order.end(), [](addrinfo* x, addrinfo* y) { return x->ai_family == AF_INET6 && y->ai_family != AF_INET6; });
  error.clear();
  for (addrinfo* a : order) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6 && host.empty()) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      listen_fd_ = fd;
      break;
    }
    error = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  if (listen_fd_ < 0) {
    error = "cannot listen for metrics on " + host_port + ": " + (error.empty() ? "no address" : error);
    return false;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  address_ = describe_address(bound);
  return true;
}

void MetricsHttp::add_poll_fds(std::vector<pollfd>& fds, uint64_t now_ns) const {
  if (listen_fd_ < 0) return;
  fds.push_back({now_ns >= accept_paused_until_ns_ ? listen_fd_ : -1, POLLIN, 0});
  // A connection waiting for its page is not read: what it sends after its request (more
  // requests, junk) would wake the loop on every turn until then.
  for (const Connection& c : connections_)
    fds.push_back({c.fd, static_cast<short>(c.waiting ? 0 : c.responding ? POLLOUT : POLLIN), 0});
}

void MetricsHttp::serve(const pollfd* fds, size_t count, uint64_t now_ns, const Render& render) {
  if (listen_fd_ < 0 || count == 0) return;
  // The connections polled are the first count - 1, in order (accepts only append).
  for (size_t i = 1; i < count && i - 1 < connections_.size(); ++i) {
    Connection& c = connections_[i - 1];
    if (c.fd != fds[i].fd || !fds[i].revents) continue;
    if (c.responding) {
      if (!write_response(c)) close_connection(c);
    } else if (c.waiting) {
      close_connection(c);  // polled for nothing: an error or a hang-up
    } else {
      read_request(c, now_ns, render);
    }
  }
  // The requests that wait for a page, in the order they came, as pages may be sent.
  for (Connection& c : connections_)
    if (c.fd >= 0 && c.waiting) send_page(c, now_ns, render);
  for (Connection& c : connections_) {
    uint64_t limit = c.responding || c.waiting ? MetricsHttpLimits::kResponseTimeoutNs : MetricsHttpLimits::kRequestTimeoutNs;
    if (c.fd >= 0 && now_ns > c.accepted_ns + limit) {
      ++counts_.timeouts;
      close_connection(c);
    }
  }
  std::erase_if(connections_, [](const Connection& c) { return c.fd < 0; });
  if (fds[0].revents & POLLIN) accept_connections(now_ns);
}

void MetricsHttp::accept_connections(uint64_t now_ns) {
  for (size_t k = 0; k < MetricsHttpLimits::kMaxAcceptsPerTurn; ++k) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors, the pending connection keeps the socket readable: rest it.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until_ns_ = now_ns + MetricsHttpLimits::kAcceptPauseNs;
      return;
    }
    if (connections_.size() >= MetricsHttpLimits::kMaxConnections) {
      // Room for the newcomer: the oldest connection still sending its request has had the
      // longest to do so (a real scraper sends its request at once). If every one is being
      // answered, or waits for its page, the newcomer is refused instead.
      auto oldest = std::find_if(connections_.begin(), connections_.end(),
                                 [](const Connection& c) { return !c.responding && !c.waiting; });
      if (oldest == connections_.end()) {
        close(fd);
        ++counts_.evicted;
        continue;
      }
      close_connection(*oldest);
      connections_.erase(oldest);
      ++counts_.evicted;
    }
    Connection c;
    c.fd = fd;
    c.accepted_ns = now_ns;
    connections_.push_back(std::move(c));
  }
}

void MetricsHttp::read_request(Connection& c, uint64_t now_ns, const Render& render) {
  char buffer[4096];
  ssize_t n = recv(c.fd, buffer, sizeof buffer, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    close_connection(c);
    return;
  }
  if (n < 0) return;
  c.in.append(buffer, static_cast<size_t>(n));
  HttpRequest r = parse_http_request(c.in);
  if (r.state == HttpRequest::State::incomplete) {
    if (c.in.size() < MetricsHttpLimits::kMaxRequestBytes) return;
    ++counts_.too_large;
    respond(c, 431, "Request Header Fields Too Large", "request too large\n", false);
  } else if (r.state == HttpRequest::State::bad) {
    ++counts_.bad_requests;
    respond(c, 400, "Bad Request", "bad request\n", false);
  } else if (r.method != "GET" && r.method != "HEAD") {
    ++counts_.bad_requests;
    respond(c, 405, "Method Not Allowed", "only GET and HEAD\n", false, "Allow: GET, HEAD\r\n");
  } else if (r.path != "/metrics") {
    ++counts_.not_found;
    respond(c, 404, "Not Found", "tandemd serves /metrics only\n", r.method == "HEAD");
  } else {
    c.waiting = true;
    c.wants_head = r.method == "HEAD";
    c.in.clear();
    c.in.shrink_to_fit();
    send_page(c, now_ns, render);
    return;
  }
  if (!write_response(c)) close_connection(c);
}

bool MetricsHttp::take_page_token(uint64_t now_ns) {
  if (tokens_ns_ && now_ns > tokens_ns_)
    page_tokens_ = std::min(static_cast<double>(MetricsHttpLimits::kPageBurst),
                            page_tokens_ + static_cast<double>(now_ns - tokens_ns_) * 1e-9 *
                                               static_cast<double>(MetricsHttpLimits::kPagesPerSecond));
  tokens_ns_ = now_ns;
  if (page_tokens_ < 1) return false;
  page_tokens_ -= 1;
  return true;
}

void MetricsHttp::send_page(Connection& c, uint64_t now_ns, const Render& render) {
  if (!take_page_token(now_ns)) {
    if (!c.waited) ++counts_.page_waits;
    c.waited = true;
    return;
  }
  c.waiting = false;
  ++counts_.pages;
  const std::shared_ptr<const std::string>& body = page(now_ns, render);
  respond(c, 200, "OK", {}, true, {}, body->size());
  if (!c.wants_head) c.body = body;
  if (!write_response(c)) close_connection(c);
}

const std::shared_ptr<const std::string>& MetricsHttp::page(uint64_t now_ns, const Render& render) {
  if (!page_ || now_ns >= next_render_ns_) {
    page_ = std::make_shared<const std::string>(render());
    ++counts_.renders;
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t done_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
    uint64_t took = done_ns > now_ns ? done_ns - now_ns : 0;
    next_render_ns_ = now_ns + std::max(MetricsHttpLimits::kMinRenderIntervalNs, took * MetricsHttpLimits::kRenderTimeShare);
  }
  return page_;
}

void MetricsHttp::respond(Connection& c, int code, std::string_view reason, std::string_view body, bool head,
                          std::string_view extra_headers, size_t length) {
  const char* type = code == 200 ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8";
  c.head = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\nContent-Type: " + type +
           "\r\nContent-Length: " + std::to_string(length == SIZE_MAX ? body.size() : length) +
           "\r\nConnection: close\r\n" + std::string(extra_headers) + "\r\n";
  if (!head) c.head += body;
  c.body.reset();
  c.sent = 0;
  c.in.clear();
  c.in.shrink_to_fit();
  c.responding = true;
}

bool MetricsHttp::write_response(Connection& c) {
  const size_t total = c.head.size() + (c.body ? c.body->size() : 0);
  while (c.sent < total) {
    // The headers, then the shared page, in one call when the socket takes them.
    iovec parts[2];
    int n_parts = 0;
    if (c.sent < c.head.size()) parts[n_parts++] = {c.head.data() + c.sent, c.head.size() - c.sent};
    if (c.body) {
      size_t from = c.sent > c.head.size() ? c.sent - c.head.size() : 0;
      parts[n_parts++] = {const_cast<char*>(c.body->data()) + from, c.body->size() - from};
    }
    msghdr m{};
    m.msg_iov = parts;
    m.msg_iovlen = static_cast<size_t>(n_parts);
    ssize_t n = sendmsg(c.fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<size_t>(n);
  }
  return false;  // all written: done
}

void MetricsHttp::close_connection(Connection& c) {
  if (c.fd < 0) return;
  close(c.fd);
  c.fd = -1;
}

}  // namespace tandem::scheduler
