// The node's slot devices as tandem-device-plugin lists them to the kubelet (docs/kubernetes.md):
// for every GPU tandemd ever reported, `max` devices per resource, of which as many are
// healthy as the GPU's SlotCount says (slot_policy.h). Devices pods hold (the pod-resources
// API) stay healthy; a shrinking count marks free ones unhealthy, the highest first. A GPU
// whose report is not current (tandemd silent or restarting, or not measuring the GPU for a
// short window yet) keeps its count until stale_after_s, then offers no free slot; a GPU the
// same tandemd stops reporting (no process uses it any more) offers none at once. GPUs are
// never dropped from the list: pods may hold their slots.
// Only GPUs tandemd reports verified (a training or inference process named them) count: an
// unverified GPU may be a UUID a filler made up, so it is never listed, and a listed GPU the
// same tandemd reports unverified (its state was freed and made anew by a filler) offers no free slot.
// Pure logic, time passed in.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "device_ids.h"
#include "slot_policy.h"
#include "tandemd_report.h"

namespace tandem::k8s {

struct Device {
  std::string id;
  bool healthy = false;
  bool operator==(const Device&) const = default;
};

class NodeSlots {
 public:
  // One reading: tandemd's report (nullopt: it did not answer) and the device IDs pods hold,
  // per resource (empty when the kubelet does not say).
  void update(double now_s, const std::optional<NodeReport>& report, const std::set<std::string> (&in_use)[2]);

  const std::vector<Device>& devices(SlotResource r) const { return lists_[static_cast<int>(r)]; }
  // Bumped whenever devices(r) changes.
  uint64_t version(SlotResource r) const { return versions_[static_cast<int>(r)]; }
  // The configuration last reported (the defaults before any).
  const SlotConfig& config() const { return config_; }
  // Whether `gpu` (32 hex digits) is one the lists name.
  bool knows_gpu(const std::string& gpu) const { return gpus_.count(gpu) != 0; }
  // What changed and what is wrong since the last call, one line each (an error once, until
  // it changes): for the log.
  std::vector<std::string> take_messages();

 private:
  struct GpuSlots {
    SlotCount counts[2];
    double last_current_s = 0;  // when its report was last current
    std::string errors[2];
  };
  // `same_daemon`: the report comes from the tandemd that sent the last one.
  // `unverified`: the report names the GPU, but not as verified (`report` is then null).
  void step_gpu(double now_s, const std::string& uuid, GpuSlots& g, const GpuReport* report, bool same_daemon,
                bool unverified, const uint32_t (&in_use)[2]);
  void rebuild(const std::set<std::string> (&in_use)[2]);

  SlotConfig config_;
  int64_t daemon_pid_ = 0;
  double daemon_started_s_ = 0;  // on this plugin's clock: tells a restarted tandemd from the same one
  std::map<std::string, GpuSlots> gpus_;  // by tandem's uuid
  std::vector<Device> lists_[2];
  uint64_t versions_[2] = {0, 0};
  std::vector<std::string> messages_;
};

}  // namespace tandem::k8s
