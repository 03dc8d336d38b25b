// The metrics endpoint (docs/metrics.md): the exposition format, the HTTP request parser, the
// GPU usage estimates, and a daemon answering scrapes over its real TCP socket, including the
// requests it must refuse and the connections it must drop.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "gpu_scheduler.h"
#include "gpu_usage.h"
#include "metrics_exposition.h"
#include "metrics_http.h"
#include "running_server.h"

using namespace tandem::scheduler;

TEST_CASE("exposition: HELP and TYPE once per family, labels escaped, values exact", "[metrics]") {
  MetricsWriter w;
  w.family("tandem_x_total", MetricsWriter::Type::counter, "a help\nline with \\ and \"quotes\"");
  w.sample({{"container", "a\"b\\c\nd"}, {"pid", "42"}}, 12345678901.0);
  w.sample({}, 0.25);
  w.family("tandem_y", MetricsWriter::Type::gauge, "nan");
  w.sample({}, std::nan(""));
  CHECK(w.text() ==
        "# HELP tandem_x_total a help\\nline with \\\\ and \"quotes\"\n# TYPE tandem_x_total counter\n"
        "tandem_x_total{container=\"a\\\"b\\\\c\\nd\",pid=\"42\"} 12345678901\ntandem_x_total 0.25\n"
        "# HELP tandem_y nan\n# TYPE tandem_y gauge\ntandem_y NaN\n");
  CHECK(format_metric_value(INFINITY) == "+Inf");
}

TEST_CASE("exposition: a histogram's buckets are cumulative and end with +Inf", "[metrics]") {
  DurationHistogram h{0.001, 0.01};
  h.observe(0.0005);
  h.observe(0.005);
  h.observe(0.005);
  h.observe(3);
  MetricsWriter w;
  w.family("tandem_d_seconds", MetricsWriter::Type::histogram, "d");
  h.write(w, {{"gpu", "g"}});
  CHECK(w.text().find("tandem_d_seconds_bucket{gpu=\"g\",le=\"0.001\"} 1\n"
                      "tandem_d_seconds_bucket{gpu=\"g\",le=\"0.01\"} 3\n"
                      "tandem_d_seconds_bucket{gpu=\"g\",le=\"+Inf\"} 4\n"
                      "tandem_d_seconds_sum{gpu=\"g\"} 3.0105\n"
                      "tandem_d_seconds_count{gpu=\"g\"} 4\n") != std::string::npos);
}

TEST_CASE("http: the request line and the end of the header", "[metrics]") {
  using S = HttpRequest::State;
  CHECK(parse_http_request("GET /metrics HTTP/1.1\r\nHost: x\r\n").state == S::incomplete);
  HttpRequest r = parse_http_request("GET /metrics?name[]=x HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(r.state == S::complete);
  CHECK(r.method == "GET");
  CHECK(r.path == "/metrics");
  CHECK(parse_http_request("HEAD / HTTP/1.0\n\n").path == "/");
  CHECK(parse_http_request("GET /metrics\r\n\r\n").state == S::bad);
  CHECK(parse_http_request("GET  /metrics HTTP/1.1\r\n\r\n").state == S::bad);
  CHECK(parse_http_request("GET /metrics SPDY/3\r\n\r\n").state == S::bad);
  CHECK(parse_http_request("\x16\x03\x01 binary\r\n\r\n").state == S::bad);
}

TEST_CASE("http: HOST:PORT", "[metrics]") {
  std::string host, port;
  CHECK((split_host_port("127.0.0.1:9433", host, port) && host == "127.0.0.1" && port == "9433"));
  CHECK((split_host_port("[::1]:0", host, port) && host == "::1" && port == "0"));
  CHECK((split_host_port(":9433", host, port) && host.empty()));
  CHECK_FALSE(split_host_port("9433", host, port));
  CHECK_FALSE(split_host_port("::1:9433", host, port));
  CHECK_FALSE(split_host_port("h:65536", host, port));
  CHECK_FALSE(split_host_port("h:", host, port));
  MetricsHttp m;
  std::string error;
  CHECK_FALSE(m.open("nonsense", error));
  CHECK(error.find("HOST:PORT") != std::string::npos);
}

TEST_CASE("gpu usage: bubble use and training retained from the ticks' figures", "[metrics]") {
  GpuUsage u;
  const uint64_t ms = 1000000;
  CHECK(std::isnan(u.training_retained()));
  uint64_t t = ms;
  u.update(t, GpuState::busy, 1.0, 0);
  // 1 s of 10 ms iterations: 6 ms busy (others complete 0.3 ms of work in it), 4 ms bubble
  // (others complete 2 ms in it).
  for (int it = 0; it < 100; ++it)
    for (int k = 0; k < 10; ++k) {
      t += ms;
      bool bubble = k >= 6;
      u.update(t, bubble ? GpuState::bubble : GpuState::busy, 1.0, bubble ? ms / 2 : (k < 3 ? ms / 10 : 0));
    }
  CHECK(u.seconds(GpuState::bubble) == Approx(0.4));
  CHECK(u.seconds(GpuState::busy) == Approx(0.6));
  CHECK(u.others_work_seconds(GpuState::bubble) == Approx(0.2));
  CHECK(u.bubble_use() == Approx(0.5).margin(0.01));
  CHECK(u.training_retained() == Approx(1 - 0.03).margin(0.005));
  // Policy slo holding training to a 40% duty cycle, nothing else running beside it.
  GpuUsage slo;
  for (int k = 0; k <= 1000; ++k) slo.update(ms * (k + 1), GpuState::busy, 0.4, 0);
  CHECK(slo.training_retained() == Approx(0.4).margin(0.001));
  CHECK(std::isnan(slo.bubble_use()));
}

namespace {

int connect_tcp(const std::string& address) {
  size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `request` and reads the response until the server closes the connection.
std::string http_exchange(const std::string& address, const std::string& request) {
  int fd = connect_tcp(address);
  if (!request.empty()) send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[65536];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof buffer, 0)) > 0) response.append(buffer, static_cast<size_t>(n));
  close(fd);
  return response;
}

ServerOptions metrics_options(const std::string& name) {
  ServerOptions o;
  o.socket_path = "/tmp/tandem-unit-metrics-" + name + "-" + std::to_string(getpid()) + ".sock";
  o.metrics_address = "127.0.0.1:0";
  return o;
}

}  // namespace

TEST_CASE("daemon: GET /metrics answers the page, other paths 404, other methods 405", "[metrics][daemon]") {
  tandem::test::RunningServer s(metrics_options("paths"));
  const std::string address = s.server.metrics_address();
  REQUIRE(address.rfind("127.0.0.1:", 0) == 0);
  CHECK(s.server.status_json().find("\"metrics\":\"" + address + "\"") != std::string::npos);
  std::string page = http_exchange(address, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
  CHECK(page.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(page.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(page.find("# TYPE tandem_daemon_tick_duration_seconds histogram\n") != std::string::npos);
  CHECK(page.find("# TYPE tandem_process_launches_total counter\n") != std::string::npos);
  size_t body = page.find("\r\n\r\n") + 4;
  CHECK(page.find("Content-Length: " + std::to_string(page.size() - body) + "\r\n") != std::string::npos);
  std::string head = http_exchange(address, "HEAD /metrics HTTP/1.1\r\n\r\n");
  CHECK(head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(head.size() == head.find("\r\n\r\n") + 4);
  CHECK(http_exchange(address, "GET /status HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(http_exchange(address, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(http_exchange(address, "hello\r\n\r\n").rfind("HTTP/1.1 400 ", 0) == 0);
  // A header larger than the limit, never ended: refused once the limit is passed.
  std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(MetricsHttpLimits::kMaxRequestBytes, 'a');
  CHECK(http_exchange(address, huge).rfind("HTTP/1.1 431 ", 0) == 0);
  // The page is rendered at most once per interval: the next one counts the refusals.
  std::this_thread::sleep_for(std::chrono::nanoseconds(MetricsHttpLimits::kMinRenderIntervalNs + 50000000ull));
  std::string counts = http_exchange(address, "GET /metrics HTTP/1.1\r\n\r\n");
  CHECK(counts.find("tandem_metrics_requests_total{code=\"404\"} 1\n") != std::string::npos);
  CHECK(counts.find("tandem_metrics_requests_total{code=\"431\"} 1\n") != std::string::npos);
}

TEST_CASE("daemon: silent connections at the cap make room for a scraper, and time out", "[metrics][daemon]") {
  tandem::test::RunningServer s(metrics_options("cap"));
  const std::string address = s.server.metrics_address();
  std::vector<int> idle;
  for (size_t i = 0; i < MetricsHttpLimits::kMaxConnections + 4; ++i) {
    idle.push_back(connect_tcp(address));
    send(idle.back(), "GET /met", 8, MSG_NOSIGNAL);  // a request that never ends
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The scraper still gets its page at once: the oldest silent connections were dropped.
  auto t0 = std::chrono::steady_clock::now();
  std::string page = http_exchange(address, "GET /metrics HTTP/1.1\r\n\r\n");
  CHECK(page.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  CHECK(page.find("tandem_metrics_connections_dropped_total{reason=\"evicted\"} 0\n") == std::string::npos);
  // The silent ones left are closed once their request is overdue.
  std::this_thread::sleep_for(std::chrono::nanoseconds(MetricsHttpLimits::kRequestTimeoutNs + 300000000ull));
  // (The sleep also outlasts the page's render interval: the page below is a fresh one.)
  char byte;
  for (int fd : idle) {
    CHECK(recv(fd, &byte, 1, 0) == 0);  // closed by the daemon (eof, nothing sent)
    close(fd);
  }
  CHECK(http_exchange(address, "GET /metrics HTTP/1.1\r\n\r\n").find("tandem_metrics_connections_dropped_total{reason=\"timeout\"} 0\n") ==
        std::string::npos);
}

TEST_CASE("daemon: a scrape flood renders the page at most once per interval", "[metrics][daemon]") {
  tandem::test::RunningServer s(metrics_options("flood"));
  const std::string address = s.server.metrics_address();
  auto t0 = std::chrono::steady_clock::now();
  int scrapes = 0;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500)) {
    REQUIRE(http_exchange(address, "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
    ++scrapes;
  }
  std::string page = http_exchange(address, "GET /metrics HTTP/1.1\r\n\r\n");
  size_t at = page.find("\ntandem_metrics_renders_total ");
  REQUIRE(at != std::string::npos);
  double renders = std::stod(page.substr(at + 30));
  double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(scrapes << " scrapes, " << renders << " renders in " << elapsed_s << " s");
  CHECK(scrapes > 20);
  CHECK(renders <= elapsed_s / (MetricsHttpLimits::kMinRenderIntervalNs / 1e9) + 2);
}

TEST_CASE("gpu usage: a GpuScheduler counts the others' completed work by state, per client life", "[metrics]") {
  const uint64_t ms = 1000000;
  SchedulerParams params;
  GpuScheduler gpu("0123456789abcdef0123456789abcdef", params);
  REQUIRE(gpu.segment().ok());
  int train = gpu.segment().claim(100, TANDEM_ROLE_TRAINING);
  int filler = gpu.segment().claim(200, TANDEM_ROLE_BATCH_INFERENCE);
  uint64_t t = 0;
  gpu.tick(t += ms);
  // Ten iterations of 3 ms busy (training launches) and 2 ms bubble, in which the filler
  // completes 0.5 ms of work per tick.
  auto iterations = [&](int slot, int n) {
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 3; ++k) {
        gpu.segment().page(train)->launches += 1;
        gpu.tick(t += ms);
      }
      for (int k = 0; k < 2; ++k) {
        tandem_client_page* p = gpu.segment().page(slot);
        p->issued_ns += ms / 2;
        p->completed_ns += ms / 2;
        gpu.tick(t += ms);
      }
    }
  };
  iterations(filler, 10);
  const GpuUsage& u = gpu.usage();
  CHECK(u.seconds(GpuState::bubble) == Approx(0.020).margin(0.0015));
  CHECK(u.seconds(GpuState::busy) == Approx(0.030).margin(0.0015));
  CHECK(u.others_work_seconds(GpuState::bubble) == Approx(0.010).margin(1e-9));  // exact: deltas of the page
  CHECK(u.others_work_seconds(GpuState::busy) == 0);
  CHECK(u.bubble_use() == Approx(0.5).margin(0.05));
  CHECK(u.training_retained() == Approx(1.0));
  // The filler goes; a new one gets the same slot and, before the daemon first looks, has done
  // more work (8 ms) than the old one's last count (5 ms): all of its work counts, once.
  gpu.segment().release(filler);
  int next = gpu.segment().claim(300, TANDEM_ROLE_BATCH_INFERENCE);
  REQUIRE(next == filler);
  gpu.segment().page(next)->issued_ns = 8 * ms;
  gpu.segment().page(next)->completed_ns = 8 * ms;
  iterations(next, 4);  // the 8 ms are first seen at a busy tick
  CHECK(u.others_work_seconds(GpuState::busy) == Approx(0.008).margin(1e-9));
  CHECK(u.others_work_seconds(GpuState::bubble) == Approx(0.014).margin(1e-9));
  CHECK(u.training_retained() < 1.0);  // work while training computed cost it time
}

// A scraper asking without pause made tandemd send a thousand pages a second (each a copy of
// an 800 KiB page with 250 processes). Now at most kPagesPerSecond pages (a burst of
// kPageBurst) are sent, the others wait their turn, and every response is the one copy.
TEST_CASE("daemon: at most 20 pages a second, later scrapes wait their turn", "[metrics][daemon]") {
  tandem::test::RunningServer s(metrics_options("pages"));
  const std::string address = s.server.metrics_address();
  const size_t asked = MetricsHttpLimits::kPageBurst + 10;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> pages;
  for (size_t i = 0; i < asked; ++i) pages.push_back(http_exchange(address, "GET /metrics HTTP/1.1\r\n\r\n"));
  double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& p : pages) CHECK(p.rfind("HTTP/1.1 200 OK", 0) == 0);
  // The ten past the burst waited for pages at 20 a second: half a second at least.
  CHECK(elapsed_s >= 10.0 / MetricsHttpLimits::kPagesPerSecond * 0.9);
  std::this_thread::sleep_for(std::chrono::nanoseconds(MetricsHttpLimits::kMinRenderIntervalNs + 50000000ull));
  std::string counts = http_exchange(address, "GET /metrics HTTP/1.1\r\n\r\n");
  size_t at = counts.find("\ntandem_metrics_page_waits_total ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(counts.substr(at + 33)) >= 5);
}
