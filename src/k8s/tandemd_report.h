// What tandem-device-plugin reads from tandemd's status document (`tandemctl status --json`;
// docs/kubernetes.md): the slots' configuration ("kubernetes_slots") and each GPU's capacity
// ("capacity", src/daemon/capacity_status.h). Parsed without trusting the document: a field
// missing or of the wrong type makes the whole report unusable, and the plugin treats tandemd
// as silent (no free slot offered once that lasts).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "slot_config.h"

namespace tandem::k8s {

struct OnlineReport {
  uint32_t clients = 0;          // online inference processes on the GPU
  uint32_t measured = 0;         // of them, with a target and a latency measured lately
  std::optional<double> headroom;  // the least (target - latency) / target among those
  bool active = false;           // policy slo: online inference active, training gated
  double training_duty = 1;      // policy slo: training's duty cycle meanwhile
  bool saturated = false;        // policy slo: over target with training at its least
  bool below_floor = false;      // policy slo: a target below what the policy can reach
};

struct GpuReport {
  std::string uuid;              // tandem's form: 32 lowercase hex digits
  // A client trusted with a protected role named it (docs/security.md): only such a GPU is
  // known to exist. Any user may name a made-up UUID as a filler; the plugin offers no slot there.
  bool verified = false;
  double measured_s = 0;         // how long tandemd has measured the GPU
  double bubble_share = 0;       // the short window's share of time fillers could use
  double pressure = 0;
  bool slo_policy = false;
  uint64_t memory_total_bytes = 0;   // 0: not known yet
  uint64_t training_peak_bytes = 0;  // what training held at its peak
  OnlineReport online;
};

struct NodeReport {
  int64_t daemon_pid = 0;
  double uptime_s = 0;
  SlotConfig slots;
  std::vector<GpuReport> gpus;
};

// The report in tandemd's status document, or nullopt with `error` saying what is wrong.
std::optional<NodeReport> parse_node_report(const std::string& status_json, std::string& error);

}  // namespace tandem::k8s
