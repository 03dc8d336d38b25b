// Departed processes (src/daemon/departed.h): the bounded list of the most recent and the
// per-role totals that never decrease; and in-process, that a client's disconnect keeps its
// last bounded view in the status document and the metrics.
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "departed.h"
#include "protocol.h"
#include "server.h"

using namespace tandem;
using scheduler::DepartedLog;
using scheduler::DepartedProcess;

namespace {

DepartedProcess process(pid_t pid, const char* role, uint64_t launches) {
  DepartedProcess p;
  p.pid = pid;
  p.role = role;
  p.launches = launches;
  p.nccl_launches = 1;
  p.completed_ns = 1000;
  return p;
}

const std::string kGpu = "0123456789abcdef0123456789abcdef";

}  // namespace

TEST_CASE("departed: the most recent first, bounded; totals count every departure") {
  DepartedLog log(3);
  for (const auto& [role, t] : log.totals()) CHECK(t.processes == 0);
  CHECK(log.totals().size() == 3);  // every role announced from the start
  for (int i = 1; i <= 10; ++i) log.add(process(i, i % 2 ? "training" : "batch-inference", 100));
  REQUIRE(log.recent().size() == 3);
  CHECK(log.recent()[0].pid == 10);
  CHECK(log.recent()[1].pid == 9);
  CHECK(log.recent()[2].pid == 8);
  // The totals keep what the list dropped.
  CHECK(log.totals().at("training").processes == 5);
  CHECK(log.totals().at("training").launches == 500);
  CHECK(log.totals().at("training").nccl_launches == 5);
  CHECK(log.totals().at("training").completed_ns == 5000);
  CHECK(log.totals().at("batch-inference").processes == 5);
  CHECK(log.totals().at("inference").processes == 0);
  // Many more departures: the list stays at its capacity.
  for (int i = 0; i < 10000; ++i) log.add(process(100 + i, "inference", 1));
  CHECK(log.recent().size() == 3);
  CHECK(log.totals().at("inference").processes == 10000);
}

TEST_CASE("departed: totals never decrease, even where a sum would wrap") {
  DepartedLog log(0);  // at least one is kept
  CHECK(log.capacity() == 1);
  log.add(process(1, "training", UINT64_MAX - 5));
  log.add(process(2, "training", 100));
  CHECK(log.totals().at("training").launches == UINT64_MAX);
  CHECK(log.recent().size() == 1);
  CHECK(log.recent()[0].pid == 2);
}

TEST_CASE("departed in-process: a closed client's last view is in the status and the metrics, bounded") {
  scheduler::ServerOptions options{"", "fill", {}};
  options.limits.departed = 2;
  scheduler::Server s(options);
  auto connect = [&](const char* role) {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
    REQUIRE(s.adopt_client_for_test(sv[1]));
    REQUIRE(send_message(sv[0], MessageType::hello,
                         nlohmann::json{{"pid", getpid()}, {"role", role}, {"gpu", kGpu}}.dump()));
    REQUIRE(s.serve_client_for_test(sv[1]));
    scheduler::Client* c = s.client_by_fd_for_test(sv[1]);
    REQUIRE(c);
    REQUIRE(c->slot >= 0);
    return std::array<int, 3>{sv[0], sv[1], c->slot};
  };
  auto [ours, server, slot] = connect("training");
  // Written after the last period's reading (none ran here): only the reading taken at the
  // disconnect sees it.
  tandem_client_page* page = s.gpu_for_test(kGpu)->segment().page(slot);
  page->launches = 1234;
  page->nccl_launches = 7;
  page->issued_ns = 5000000;
  page->completed_ns = 9000000;  // more than issued: bounded to it
  page->peak_bytes = 64 << 20;
  close(ours);
  CHECK_FALSE(s.serve_client_for_test(server));
  CHECK(s.invariant_violation_for_test().empty());

  nlohmann::json status = nlohmann::json::parse(s.status_json());
  REQUIRE(status["departed"].size() == 1);
  const auto& d = status["departed"][0];
  CHECK(d["pid"] == getpid());
  CHECK(d["role"] == "training");
  CHECK(d["gpu"] == kGpu);
  CHECK(d["launches"] == 1234);
  CHECK(d["nccl_launches"] == 7);
  CHECK(d["completed_ns"] == 5000000);
  CHECK(d["peak_bytes"] == 64 << 20);
  CHECK(d["departed_s_ago"].get<double>() >= 0);
  std::string metrics = s.metrics_text();
  CHECK(metrics.find("tandem_departed_processes_total{role=\"training\"} 1\n") != std::string::npos);
  CHECK(metrics.find("tandem_departed_launches_total{role=\"training\",kind=\"compute\"} 1234\n") != std::string::npos);
  CHECK(metrics.find("tandem_departed_launches_total{role=\"training\",kind=\"nccl\"} 7\n") != std::string::npos);
  CHECK(metrics.find("tandem_departed_gpu_work_completed_seconds_total{role=\"training\"} 0.005\n") !=
        std::string::npos);
  CHECK(metrics.find("tandem_departed_processes_total{role=\"inference\"} 0\n") != std::string::npos);

  // A page that claims more than a process could have launched is read through the same
  // bounds as every period: the record is bounded too.
  auto [ours2, server2, slot2] = connect("batch-inference");
  s.gpu_for_test(kGpu)->segment().page(slot2)->launches = 1ull << 40;
  close(ours2);
  CHECK_FALSE(s.serve_client_for_test(server2));
  status = nlohmann::json::parse(s.status_json());
  REQUIRE(status["departed"].size() == 2);
  CHECK(status["departed"][0]["role"] == "batch-inference");  // the most recent first
  CHECK(status["departed"][0]["launches"].get<uint64_t>() <= scheduler::ClientBounds::kLaunchesPerPeriod);
  CHECK(status["departed"][0]["page_violations"].get<uint64_t>() >= 1);

  // Past the capacity (2 here) the oldest goes; the totals keep it.
  auto [ours3, server3, slot3] = connect("inference");
  close(ours3);
  CHECK_FALSE(s.serve_client_for_test(server3));
  status = nlohmann::json::parse(s.status_json());
  REQUIRE(status["departed"].size() == 2);
  CHECK(status["departed"][0]["role"] == "inference");
  CHECK(status["departed"][1]["role"] == "batch-inference");
  metrics = s.metrics_text();
  CHECK(metrics.find("tandem_departed_processes_total{role=\"training\"} 1\n") != std::string::npos);
  CHECK(metrics.find("tandem_departed_processes_total{role=\"inference\"} 1\n") != std::string::npos);
  (void)slot3;
}

TEST_CASE("departed in-process: a connection without a slot leaves no record") {
  scheduler::Server s(scheduler::ServerOptions{"", "fill", {}});
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
  REQUIRE(s.adopt_client_for_test(sv[1]));
  REQUIRE(send_message(sv[0], MessageType::status_request, "{}"));
  REQUIRE(s.serve_client_for_test(sv[1]));
  close(sv[0]);
  CHECK_FALSE(s.serve_client_for_test(sv[1]));
  CHECK(nlohmann::json::parse(s.status_json())["departed"].empty());
}
