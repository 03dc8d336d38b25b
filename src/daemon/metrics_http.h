// tandemd's metrics endpoint (`tandemd --metrics HOST:PORT`, docs/metrics.md): plain HTTP/1.1
// on its own TCP socket, served from the daemon's loop so that a page is always one coherent
// reading of the daemon's state and no lock is ever taken. Whoever can reach the port can
// scrape, so a hostile scraper must not hurt scheduling: every socket is non-blocking; a turn
// accepts at most a few connections and reads a bounded number of bytes; a request larger
// than kMaxRequestBytes is answered 431 and closed; one that is not complete within
// kRequestTimeoutNs is closed (slowloris), and so is a response not taken within
// kResponseTimeoutNs; at the connection cap the oldest connection still sending its request
// makes room for the new one; the page is rendered at most once per kMinRenderIntervalNs, and
// never more often than kRenderTimeShare of the loop's time (a page of many processes takes
// longer to make), however often it is asked for, and every response shares that one copy;
// at most kPagesPerSecond pages are sent (a burst of kPageBurst), later requests wait their
// turn in order: sending a page of many processes costs its size in copies, and a scraper
// asking without pause made the daemon send a thousand a second; out of descriptors, the
// listening socket rests for kAcceptPauseNs instead of waking the loop again and again. Only
// `GET` (or `HEAD`) of `/metrics` gets the page; other paths get 404, other methods 405. Every
// response closes its connection.
#pragma once
#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::scheduler {

struct MetricsHttpLimits {
  static constexpr size_t kMaxConnections = 16;
  static constexpr size_t kMaxAcceptsPerTurn = 8;
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr uint64_t kRequestTimeoutNs = 2000000000ull;
  static constexpr uint64_t kResponseTimeoutNs = 10000000000ull;
  static constexpr uint64_t kMinRenderIntervalNs = 100000000ull;
  static constexpr uint64_t kRenderTimeShare = 20;  // a render taking t waits 20 t for the next
  static constexpr uint64_t kAcceptPauseNs = 100000000ull;
  static constexpr uint64_t kPagesPerSecond = 20;
  static constexpr uint64_t kPageBurst = 20;
};

// What a request's bytes say so far.
struct HttpRequest {
  enum class State { incomplete, complete, bad } state = State::incomplete;
  std::string method, path;  // path without its query string
};
// Parses the request line and finds the end of the header (a blank line). Pure: for tests.
HttpRequest parse_http_request(std::string_view bytes);

// "127.0.0.1:9433", "[::1]:9433", "localhost:9433", ":9433" (every interface) -> host and
// port. False when it is not HOST:PORT with a port 0-65535 (0: the kernel picks one).
bool split_host_port(const std::string& text, std::string& host, std::string& port);

class MetricsHttp {
 public:
  using Render = std::function<std::string()>;
  MetricsHttp() = default;
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  // Listens on HOST:PORT. False, with `error`, when it is malformed or cannot be bound.
  bool open(const std::string& host_port, std::string& error);
  bool listening() const { return listen_fd_ >= 0; }
  // The address bound (the port the kernel chose for port 0), e.g. "127.0.0.1:40123".
  const std::string& address() const { return address_; }

  // Adds the listening socket and the connections to a poll set...
  void add_poll_fds(std::vector<pollfd>& fds, uint64_t now_ns) const;
  // ...and serves what that poll found (`fds`: the entries added above, in the same order).
  // `render` makes the page; it is called only when a complete request asks for it and the
  // last page is older than kMinRenderIntervalNs.
  void serve(const pollfd* fds, size_t count, uint64_t now_ns, const Render& render);

  struct Counts {
    uint64_t pages = 0, renders = 0, not_found = 0, bad_requests = 0, too_large = 0, timeouts = 0, evicted = 0;
    uint64_t page_waits = 0;  // page requests that waited for their turn (kPagesPerSecond)
  };
  const Counts& counts() const { return counts_; }
  size_t connections() const { return connections_.size(); }

 private:
  struct Connection {
    int fd = -1;
    uint64_t accepted_ns = 0;
    std::string in;      // request bytes so far
    std::string head;    // the response's status line and headers (or a short body with them)
    std::shared_ptr<const std::string> body;  // the page, shared with every other response
    size_t sent = 0;     // of head, then body
    bool responding = false;
    bool waiting = false;  // asked for the page (wants_head: HEAD), waits for its turn
    bool wants_head = false;
    bool waited = false;   // counted in page_waits
  };
  void accept_connections(uint64_t now_ns);
  void read_request(Connection& c, uint64_t now_ns, const Render& render);
  // The status line and headers, and `body` unless `head`; Content-Length is `length` when
  // given (a page sent apart, from the shared copy), else the body's.
  void respond(Connection& c, int code, std::string_view reason, std::string_view body, bool head,
               std::string_view extra_headers = {}, size_t length = SIZE_MAX);
  // The page to `c`, if a page may be sent now (kPagesPerSecond); else it waits its turn.
  void send_page(Connection& c, uint64_t now_ns, const Render& render);
  bool take_page_token(uint64_t now_ns);
  // False when the connection is finished (all written, or the peer is gone).
  bool write_response(Connection& c);
  void close_connection(Connection& c);
  const std::shared_ptr<const std::string>& page(uint64_t now_ns, const Render& render);

  int listen_fd_ = -1;
  std::string address_;
  std::vector<Connection> connections_;  // in accept order
  std::shared_ptr<const std::string> page_;
  uint64_t next_render_ns_ = 0;
  double page_tokens_ = static_cast<double>(MetricsHttpLimits::kPageBurst);
  uint64_t tokens_ns_ = 0;  // when page_tokens_ was last refilled
  uint64_t accept_paused_until_ns_ = 0;
  Counts counts_;
};

}  // namespace tandem::scheduler
