// tandem-device-plugin's logic (src/k8s, docs/kubernetes.md): device names, the bounds a GPU's
// report puts on its slots, the hysteresis that keeps a steady load from flapping while lost
// capacity reaches the kubelet within seconds (a training job simulated tick by tick through
// tandemd's own capacity meter), the health of each device, and Allocate's answer.
#include <catch2/catch.hpp>
#include <cstdio>
#include <random>

#include "allocate.h"
#include "gpu_capacity.h"
#include "node_slots.h"
#include "slot_policy.h"

using namespace tandem;
using namespace tandem::k8s;

namespace {

const std::string kGpu = "c6a78dce2105431c836d15f3d88f49b1";
const std::string kOther = "1b6763843dbd4550b3fbc5a164179a14";
const std::set<std::string> kNone[2];

GpuReport gpu_report(const std::string& uuid, double share, double measured_s = 100) {
  GpuReport g;
  g.uuid = uuid;
  g.verified = true;
  g.measured_s = measured_s;
  g.bubble_share = share;
  g.memory_total_bytes = 80ull << 30;
  g.training_peak_bytes = 1ull << 30;
  return g;
}

NodeReport node(std::vector<GpuReport> gpus, const SlotConfig& config = SlotConfig(), int64_t pid = 7, double uptime = 1000) {
  NodeReport r;
  r.daemon_pid = pid;
  r.uptime_s = uptime;
  r.slots = config;
  r.gpus = std::move(gpus);
  return r;
}

uint32_t healthy(const NodeSlots& s, SlotResource r, const std::string& uuid) {
  uint32_t n = 0;
  for (const Device& d : s.devices(r)) n += d.healthy && d.id.rfind(nvidia_uuid(uuid), 0) == 0;
  return n;
}

// A training job on one GPU, tick by tick (1 ms) through tandemd's capacity meter, polled by
// the plugin's logic once a second: the bubble slots' count over time.
struct Simulation {
  SlotConfig config;
  scheduler::GpuCapacity capacity;
  NodeSlots slots;
  std::mt19937 random{1};
  uint64_t now_ns = 1;
  double next_poll_s = 1;
  std::vector<std::pair<double, uint32_t>> changes;  // (time, new count)

  explicit Simulation(const SlotConfig& c) : config(c), capacity(c) {}
  double now_s() const { return static_cast<double>(now_ns) / 1e9; }
  // Iterations of `period_s`, each idle (fillable) for `idle` of it, give or take `jitter` of that.
  void run(double seconds, double period_s, double idle, double jitter = 0) {
    std::uniform_real_distribution<double> spread(1 - jitter, 1 + jitter);
    const double end = now_s() + seconds;
    while (now_s() < end) {
      const double bubble = period_s * idle * spread(random);
      advance(period_s - bubble, false);
      advance(bubble, true);
    }
  }
  void advance(double seconds, bool bubble) {
    for (double t = 0; t < seconds; t += 0.001) {
      now_ns += 1000000;
      capacity.update(now_ns, bubble ? scheduler::GpuState::bubble : scheduler::GpuState::busy, bubble, 0);
      if (now_s() >= next_poll_s) poll();
    }
  }
  void poll() {
    next_poll_s += 1;
    GpuReport g = gpu_report(kGpu, capacity.bubble_share(), capacity.measured_s());
    uint32_t before = healthy(slots, SlotResource::bubble, kGpu);
    slots.update(now_s(), node({g}, config, 7, now_s()), kNone);
    uint32_t after = healthy(slots, SlotResource::bubble, kGpu);
    if (after != before) changes.emplace_back(now_s(), after);
  }
  uint32_t count() const { return healthy(slots, SlotResource::bubble, kGpu); }
  // The most changes within any minute from `from_s` on.
  size_t most_changes_a_minute(double from_s) const {
    size_t most = 0;
    for (size_t i = 0; i < changes.size(); ++i) {
      size_t n = 0;
      for (size_t j = i; j < changes.size() && changes[j].first < changes[i].first + 60; ++j) n += changes[i].first >= from_s;
      most = std::max(most, n);
    }
    return most;
  }
};

}  // namespace

TEST_CASE("device ids: NVIDIA's UUID form, one device per slot, and nothing else parses", "[k8s]") {
  CHECK(nvidia_uuid(kGpu) == "GPU-c6a78dce-2105-431c-836d-15f3d88f49b1");
  CHECK(device_id(kGpu, SlotResource::bubble, 3) == "GPU-c6a78dce-2105-431c-836d-15f3d88f49b1-b3");
  CHECK(device_id(kGpu, SlotResource::slo, 63).size() <= 63);
  auto d = parse_device_id("GPU-c6a78dce-2105-431c-836d-15f3d88f49b1-s12", SlotResource::slo);
  REQUIRE(d);
  CHECK(d->gpu == kGpu);
  CHECK(d->index == 12);
  for (const char* bad : {"GPU-c6a78dce-2105-431c-836d-15f3d88f49b1-s1", "GPU-c6a78dce-2105-431c-836d-15f3d88f49b1-b01",
                          "GPU-C6A78DCE-2105-431c-836d-15f3d88f49b1-b1", "GPU-c6a78dce-2105-431c-836d-15f3d88f49b1-b",
                          "GPU-c6a78dce-2105-431c-836d-15f3d88f49b1-b123", "GPU-c6a78dce21054-31c-836d-15f3d88f49b1-b1",
                          "MIG-c6a78dce-2105-431c-836d-15f3d88f49b1-b1", "", "-b1"})
    CHECK_FALSE(parse_device_id(bad, SlotResource::bubble));
}

TEST_CASE("bounds: the bubble share less the margin, read either side of the band, capped by memory", "[k8s]") {
  SlotConfig c;  // slots of 0.1 and 4 GiB, margin 0.05, band 0.05
  SlotBounds b = bubble_bounds(gpu_report(kGpu, 0.36), c, 0);
  CHECK(b.up == 2);    // (0.36 - 0.05 - 0.025) / 0.1 = 2.85
  CHECK(b.down == 3);  // (0.36 - 0.05 + 0.025) / 0.1 = 3.35
  CHECK(bubble_bounds(gpu_report(kGpu, 0.02), c, 0).up == 0);
  CHECK(bubble_bounds(gpu_report(kGpu, 1.0), c, 0).up == 8);  // max
  GpuReport full = gpu_report(kGpu, 0.9);
  full.training_peak_bytes = 70ull << 30;  // 10 GiB left: two slots of 4 GiB
  CHECK(bubble_bounds(full, c, 0).down == 2);
  CHECK(bubble_bounds(full, c, 1).down == 0);  // an slo slot's 8 GiB set aside first
  GpuReport unknown = gpu_report(kGpu, 0.9);
  unknown.memory_total_bytes = 0;
  CHECK(bubble_bounds(unknown, c, 0).down == 0);  // the GPU's size not reported yet
  SlotConfig big = c;
  REQUIRE(parse_memory_size("100G", big.bubble.memory));
  big.bubble.memory_text = "100G";
  b = bubble_bounds(gpu_report(kGpu, 0.9), big, 0);
  CHECK(b.up == 0);
  CHECK(b.error.find("100G (100.0 GiB), is more than GPU " + kGpu + " has (80.0 GiB)") != std::string::npos);
  SlotConfig wide = c;
  wide.bubble.share = 0.99;
  CHECK(bubble_bounds(gpu_report(kGpu, 0.99), wide, 0).error.find("more than a GPU offers") != std::string::npos);
}

TEST_CASE("bounds: slo slots under policy slo, held to the servers there when a target has no headroom", "[k8s]") {
  SlotConfig c;  // slo slots of 0.25 and 8 GiB, training keeps 0.5, headroom 0.2
  GpuReport g = gpu_report(kGpu, 0.3);
  CHECK(slo_bounds(g, c, 0).up == 0);  // policy fill: latency is not protected
  g.slo_policy = true;
  CHECK(slo_bounds(g, c, 0).up == 1);  // (1 - 0.5 - 0.05) / 0.25
  c.slo.share = 0.1;
  CHECK(slo_bounds(g, c, 0).up == 4);  // max 4
  g.online = {1, 1, 0.5, true, 0.7, false, false};  // training at 0.7: 0.15 spare, one more slot
  CHECK(slo_bounds(g, c, 1).up == 2);
  CHECK(slo_bounds(g, c, 1).down == 2);
  g.online.headroom = 0.1;  // a target nearly missed: none beyond what servers hold
  CHECK(slo_bounds(g, c, 1).up == 1);
  CHECK(slo_bounds(g, c, 1).down == 1);
  g.online.headroom = 0.5;
  g.online.saturated = true;
  CHECK(slo_bounds(g, c, 0).down == 0);
  c.slo.share = 0.5;
  CHECK(slo_bounds(g, c, 0).error.find("more than online inference may take") != std::string::npos);
}

TEST_CASE("counting: a steady load does not flap, however noisy its iterations", "[k8s]") {
  // Iterations of a second, bubbles of +-20% each, an hour of them: a share well inside a count
  // (0.30), and one on the very boundary between one slot and two (0.25 less the band's half).
  for (double idle : {0.30, 0.25, 0.275}) {
    Simulation s{SlotConfig()};
    s.run(3600, 1.0, idle, 0.2);
    std::string trail;
    for (const auto& [t, n] : s.changes) trail += std::to_string(static_cast<int>(t)) + "s:" + std::to_string(n) + " ";
    INFO("idle " << idle << ", changes: " << trail);
    CHECK(s.most_changes_a_minute(120) <= 1);
    CHECK(s.changes.size() <= 10);
    CHECK(s.count() >= 1);
  }
  // Without the band, the hold and the interval, the boundary flaps.
  SlotConfig bare;
  bare.hysteresis = 0;
  bare.grow_after_s = 0.001;
  bare.min_interval_s = 0.001;
  Simulation flapping{bare};
  flapping.run(3600, 1.0, 0.25, 0.2);
  CHECK(flapping.most_changes_a_minute(120) > 1);
}

TEST_CASE("counting: bubbles that vanish leave within 10 s; that appear, arrive within 10 s", "[k8s]") {
  Simulation s{SlotConfig()};
  s.run(120, 0.04, 0.30);  // train-sim's iterations: 30% fillable
  CHECK(s.count() == 2);
  const double vanished = s.now_s();
  s.run(70, 0.04, 0.0);  // training ramps up
  REQUIRE_FALSE(s.changes.empty());
  CHECK(s.changes.back().second == 0);
  CHECK(s.changes.back().first - vanished <= 10);
  const double appeared = s.now_s();
  s.run(30, 0.04, 0.30);
  CHECK(s.count() == 2);
  CHECK(s.changes.back().first - appeared <= 10);
  // Back within a minute of a fall: the growth waits for min_interval_s.
  s.run(20, 0.04, 0.0);
  const double fell = s.changes.back().first;
  s.run(70, 0.04, 0.30);
  CHECK(s.changes.back().first - fell >= 60);
  CHECK(s.count() == 2);
}

TEST_CASE("node slots: held devices stay healthy, free ones go first; stale and vanished GPUs offer none", "[k8s]") {
  SlotConfig c;
  c.grow_after_s = 0;
  NodeSlots s;
  std::set<std::string> held[2];
  s.update(0, node({gpu_report(kGpu, 0.40), gpu_report(kOther, 0.0)}, c), held);
  s.update(1, node({gpu_report(kGpu, 0.40), gpu_report(kOther, 0.0)}, c), held);
  CHECK(healthy(s, SlotResource::bubble, kGpu) == 3);
  CHECK(healthy(s, SlotResource::bubble, kOther) == 0);
  CHECK(s.devices(SlotResource::bubble).size() == 16);  // max 8 per GPU, healthy or not
  CHECK(s.devices(SlotResource::slo).size() == 8);
  // A pod holds b5; the share falls to two slots: b5 and b0 stay, b1 and b2 go.
  held[0].insert(device_id(kGpu, SlotResource::bubble, 5));
  const uint64_t version = s.version(SlotResource::bubble);
  s.update(2, node({gpu_report(kGpu, 0.27), gpu_report(kOther, 0.0)}, c), held);
  CHECK(s.version(SlotResource::bubble) == version + 1);
  std::set<std::string> up;
  for (const Device& d : s.devices(SlotResource::bubble))
    if (d.healthy) up.insert(d.id);
  CHECK(up == std::set<std::string>{device_id(kGpu, SlotResource::bubble, 0), device_id(kGpu, SlotResource::bubble, 5)});
  s.update(3, node({gpu_report(kGpu, 0.27), gpu_report(kOther, 0.0)}, c), held);
  CHECK(s.version(SlotResource::bubble) == version + 1);  // nothing changed: no new list
  // A young report (tandemd restarted) keeps the count; silence past stale_after_s ends it,
  // except for the slot a pod holds.
  s.update(4, node({gpu_report(kGpu, 0.0, 0.5)}, c, 8, 1), held);
  CHECK(healthy(s, SlotResource::bubble, kGpu) == 2);
  s.update(20, std::nullopt, held);
  CHECK(healthy(s, SlotResource::bubble, kGpu) == 2);
  s.update(40, std::nullopt, held);
  CHECK(healthy(s, SlotResource::bubble, kGpu) == 1);
  // The same tandemd no longer reporting a GPU: nothing on it is in use any more.
  NodeSlots t;
  t.update(0, node({gpu_report(kGpu, 0.40)}, c), kNone);
  t.update(1, node({gpu_report(kGpu, 0.40)}, c), kNone);
  REQUIRE(healthy(t, SlotResource::bubble, kGpu) == 3);
  t.update(2, node({}, c, 7, 1002), kNone);
  CHECK(healthy(t, SlotResource::bubble, kGpu) == 0);
  CHECK(t.knows_gpu(kGpu));  // still listed: pods may hold its slots
  // A bad slot size is said once.
  SlotConfig big = c;
  REQUIRE(parse_memory_size("100G", big.bubble.memory));
  NodeSlots u;
  u.update(0, node({gpu_report(kGpu, 0.40)}, big), kNone);
  u.update(1, node({gpu_report(kGpu, 0.40)}, big), kNone);
  u.update(2, node({gpu_report(kGpu, 0.40)}, big), kNone);
  std::vector<std::string> said = u.take_messages();
  CHECK(std::count_if(said.begin(), said.end(), [](const std::string& m) { return m.rfind("error: ", 0) == 0; }) == 1);
}

// A filler-only user named made-up GPUs and the plugin listed 512 bubble and 256 slo devices on
// them. tandemd reports whether a training or inference process named each GPU; only those are
// listed, and a listed GPU reported unverified offers nothing free.
TEST_CASE("node slots: GPUs tandemd has not verified offer no device", "[k8s]") {
  SlotConfig c;
  c.grow_after_s = 0;
  std::vector<GpuReport> made_up;
  for (int n = 0; n < 64; ++n) {
    char uuid[33];
    std::snprintf(uuid, sizeof uuid, "%032x", 0x1000 + n);
    made_up.push_back(gpu_report(uuid, 0.9));
    made_up.back().verified = false;
  }
  NodeSlots s;
  for (double t : {0.0, 1.0, 2.0}) s.update(t, node(made_up, c), kNone);
  CHECK(s.devices(SlotResource::bubble).empty());
  CHECK(s.devices(SlotResource::slo).empty());
  CHECK_FALSE(s.knows_gpu(made_up[0].uuid));
  CHECK(s.take_messages().empty());  // nor a line each in the log
  // Beside a verified GPU: that one alone.
  std::vector<GpuReport> both = made_up;
  both.push_back(gpu_report(kGpu, 0.40));
  s.update(3, node(both, c), kNone);
  s.update(4, node(both, c), kNone);
  CHECK(s.devices(SlotResource::bubble).size() == 8);
  CHECK(healthy(s, SlotResource::bubble, kGpu) == 3);
  // The same tandemd reports it unverified (its state was freed and made anew by a filler):
  // no free slot at once; a slot a pod holds stays healthy.
  std::set<std::string> held[2];
  held[0].insert(device_id(kGpu, SlotResource::bubble, 0));
  both.back().verified = false;
  s.update(5, node(both, c), held);
  CHECK(healthy(s, SlotResource::bubble, kGpu) == 1);
  CHECK(s.knows_gpu(kGpu));  // still listed: pods may hold its slots
  // A document without the flag (a tandemd older than the plugin) is not used.
  std::string error;
  CHECK_FALSE(parse_node_report(
      R"({"daemon": {"pid": 1, "uptime_s": 5, "kubernetes_slots": {}},
          "gpus": [{"uuid": "c6a78dce2105431c836d15f3d88f49b1", "capacity": {}}]})", error));
  CHECK(error.find("verified") != std::string::npos);
}

TEST_CASE("allocate: the GPU, the preload, the role and quota, the mounts; unknown devices refused", "[k8s]") {
  NodeSlots s;
  s.update(0, node({gpu_report(kGpu, 0.4), gpu_report(kOther, 0.4)}), kNone);
  AllocateOptions o;
  o.host_socket_dir = "/run/tandem-node";
  std::string error;
  auto g = grant_for({device_id(kGpu, SlotResource::bubble, 0), device_id(kGpu, SlotResource::bubble, 1)},
                     SlotResource::bubble, s, o, error);
  REQUIRE(g);
  CHECK(g->envs["NVIDIA_VISIBLE_DEVICES"] == nvidia_uuid(kGpu));
  CHECK(g->envs["TANDEM_ROLE"] == "batch-inference");
  CHECK(g->envs["TANDEM_MEM_LIMIT"] == std::to_string(8ull << 30));
  CHECK(g->envs["LD_PRELOAD"] == "/opt/tandem/lib/libtandem.so");
  CHECK(g->envs["TANDEM_SOCKET"] == "/run/tandem/tandemd.sock");
  REQUIRE(g->mounts.size() == 2);
  // The grant's directory, never tandemd's own socket's; the grant holds the slot's rights.
  const std::string name = grant_name({device_id(kGpu, SlotResource::bubble, 1), device_id(kGpu, SlotResource::bubble, 0)});
  CHECK(g->tandemd_grant.name == name);  // the same devices in any order: the same grant
  CHECK(g->mounts[0].host_path == "/run/tandem-node/grants/" + name);
  CHECK(g->mounts[0].container_path == "/run/tandem");
  CHECK(g->tandemd_grant.role == "batch-inference");
  CHECK(g->tandemd_grant.gpus == std::vector<std::string>{kGpu});
  CHECK(g->tandemd_grant.memory_limit == std::to_string(8ull << 30));
  CHECK(grant_name({device_id(kGpu, SlotResource::bubble, 2)}) != name);
  CHECK(g->mounts[1].host_path == "/var/lib/tandem/lib");
  CHECK(g->cdi_devices.empty());
  // Two GPUs, CDI names: both named, the quota of the most slots held on one.
  o.cdi = true;
  g = grant_for({device_id(kGpu, SlotResource::slo, 0), device_id(kOther, SlotResource::slo, 1)}, SlotResource::slo, s, o,
                error);
  REQUIRE(g);
  CHECK(g->envs.count("NVIDIA_VISIBLE_DEVICES") == 0);
  CHECK(g->cdi_devices == std::vector<std::string>{"nvidia.com/gpu=" + nvidia_uuid(kGpu), "nvidia.com/gpu=" + nvidia_uuid(kOther)});
  CHECK(g->envs["TANDEM_ROLE"] == "inference");
  CHECK(g->envs["TANDEM_MEM_LIMIT"] == std::to_string(8ull << 30));
  CHECK(g->tandemd_grant.gpus == std::vector<std::string>{kGpu, kOther});
  for (const std::string& bad : {device_id(kGpu, SlotResource::slo, 0), device_id(kGpu, SlotResource::bubble, 8),
                                 device_id(std::string(32, 'a'), SlotResource::bubble, 0), std::string("x")}) {
    CHECK_FALSE(grant_for({bad}, SlotResource::bubble, s, o, error));
    CHECK(error.find(bad) != std::string::npos);
  }
  CHECK_FALSE(grant_for({}, SlotResource::bubble, s, o, error));
}
