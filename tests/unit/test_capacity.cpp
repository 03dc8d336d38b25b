// tandemd's side of the Kubernetes slots (docs/kubernetes.md): the "slots" configuration (one
// parser for tandemd and the device plugin), a GPU's room for fillers over the short and the
// long window and the pressure on it (gpu_capacity.h), and the status document the plugin
// reads, from a daemon driven in-process.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon_config.h"
#include "gpu_capacity.h"
#include "protocol.h"
#include "server.h"
#include "slot_config.h"
#include "tandemd_report.h"

using namespace tandem;
using scheduler::GpuCapacity;
using scheduler::GpuState;

namespace {
constexpr uint64_t kMs = 1000000;

// `seconds` of iterations of `period_ms`, training idle (fillable) for `idle` of each.
void iterate(GpuCapacity& c, uint64_t& now, double seconds, uint64_t period_ms, double idle, uint32_t fillers = 0) {
  const uint64_t end = now + static_cast<uint64_t>(seconds * 1000) * kMs;
  while (now < end)
    for (uint64_t ms = 0; ms < period_ms; ++ms) {
      now += kMs;
      const bool bubble = static_cast<double>(ms) >= static_cast<double>(period_ms) * (1 - idle);
      c.update(now, bubble ? GpuState::bubble : GpuState::busy, bubble, fillers);
    }
}
}  // namespace

TEST_CASE("slot config: defaults, a partial object over them, errors that name the key", "[k8s]") {
  SlotConfig c;
  CHECK(c.bubble.share == 0.1);
  CHECK(c.bubble.memory.bytes == 4ull << 30);
  CHECK(c.slo.max == 4);
  std::string error;
  REQUIRE(apply_slot_config(nlohmann::json::parse(R"({"bubble": {"share": 0.2, "memory": "10%"}, "margin": 0.1,
                                                      "fast_window_s": 5})"), c, error));
  CHECK(c.bubble.share == 0.2);
  CHECK(c.bubble.memory.is_percent);
  CHECK(c.bubble.max == 8);  // kept
  CHECK(c.margin == 0.1);
  CHECK(c.fast_window_s == 5);
  // What tandemd echoes reads back to the same configuration.
  SlotConfig back;
  REQUIRE(apply_slot_config(slot_config_json(c), back, error));
  CHECK(slot_config_json(back) == slot_config_json(c));
  for (const char* bad : {R"({"bubble": {"share": 0}})", R"({"bubble": {"share": 1.5}})", R"({"slo": {"memory": "lots"}})",
                          R"({"bubble": {"max": 65}})", R"({"margin": -0.1})", R"({"window_s": 0})", R"({"spare": 1})",
                          R"({"bubble": {"colour": "red"}})", R"([])"}) {
    SlotConfig d;
    CHECK_FALSE(apply_slot_config(nlohmann::json::parse(bad), d, error));
    CHECK_FALSE(error.empty());
  }
  // Through tandemd's configuration file, the key named in the error.
  scheduler::DaemonConfig config;
  CHECK_FALSE(scheduler::apply_config(R"({"slots": {"bubble": {"share": 2}}})", config, error));
  CHECK(error.rfind("slots: bubble.share", 0) == 0);
  REQUIRE(scheduler::apply_config(R"({"slots": {"slo": {"share": 0.3}}})", config, error));
  CHECK(config.server.scheduler.slots.slo.share == 0.3);
}

TEST_CASE("gpu capacity: the fillable share over both windows, and pressure once the long one is measured", "[k8s]") {
  SlotConfig config;
  config.window_s = 20;
  GpuCapacity c(config);
  uint64_t now = 1;
  c.update(now, GpuState::busy, false, 0);
  iterate(c, now, 10, 40, 0.3, 1);
  CHECK(c.bubble_share() == Approx(0.3).margin(0.02));
  CHECK(c.bubble_share_long() == Approx(0.3).margin(0.02));
  CHECK(c.pressure() == 0);  // not measured one long window yet
  iterate(c, now, 15, 40, 0.3, 2);
  CHECK(c.pressure() == 0);  // two fillers of 0.1 fit in 0.3 - 0.05
  // Training ramps up: no bubble. The short window follows within seconds, the long one slowly;
  // the pressure rises as the room the long window saw shrinks below the fillers' slots.
  iterate(c, now, 3, 40, 0, 2);
  CHECK(c.bubble_share() < 0.1);
  CHECK(c.bubble_share_long() > 0.2);
  const double early = c.pressure();
  iterate(c, now, 40, 40, 0, 2);
  CHECK(c.bubble_share_long() < 0.05);
  CHECK(c.pressure() > early);
  CHECK(c.pressure() == 1);
  // Without training the GPU is free: no pressure on the fillers, yet no bubble to offer.
  for (int i = 0; i < 40000; ++i) c.update(now += kMs, GpuState::no_training, false, 2);
  CHECK(c.free_share_long() > 0.8);
  CHECK(c.pressure() == 0);
  CHECK(c.bubble_share() == Approx(0).margin(1e-6));
}

TEST_CASE("status: a GPU's capacity and the slots' configuration, as the device plugin reads them", "[k8s]") {
  scheduler::ServerOptions options{"", "fill", {}};
  options.scheduler.slots.bubble.share = 0.2;
  scheduler::Server s(options);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
  REQUIRE(s.adopt_client_for_test(sv[1]));
  const std::string gpu = "0123456789abcdef0123456789abcdef";
  REQUIRE(send_message(sv[0], MessageType::hello,
                       nlohmann::json{{"role", "training"}, {"gpu", gpu}, {"gpu_total_bytes", 80ull << 30}}.dump()));
  REQUIRE(s.serve_client_for_test(sv[1]));
  for (uint64_t t = 1; t <= 100; ++t) s.tick_for_test(scheduler::monotonic_ns() + t * kMs);
  std::string error;
  std::optional<k8s::NodeReport> report = k8s::parse_node_report(s.status_json(), error);
  INFO(error);
  REQUIRE(report);
  CHECK(report->daemon_pid == getpid());
  CHECK(report->slots.bubble.share == 0.2);
  REQUIRE(report->gpus.size() == 1);
  CHECK(report->gpus[0].uuid == gpu);
  CHECK(report->gpus[0].verified);  // named by a training process (tandemd's own uid)
  CHECK(report->gpus[0].memory_total_bytes == 80ull << 30);
  CHECK(report->gpus[0].measured_s > 0);
  CHECK_FALSE(report->gpus[0].slo_policy);
  CHECK(s.node_pressure() == 0);
  close(sv[0]);
  s.serve_client_for_test(sv[1]);
}
