#include "node_slots.h"

#include <algorithm>
#include <array>
#include <cstdio>

namespace tandem::k8s {

namespace {

std::string share_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", x);
  return text;
}

}  // namespace

void NodeSlots::update(double now_s, const std::optional<NodeReport>& report, const std::set<std::string> (&in_use)[2]) {
  bool same_daemon = false;
  if (report) {
    config_ = report->slots;
    const double started = now_s - report->uptime_s;
    // The same pid, and a start that agrees within a few seconds (the reply's age).
    same_daemon = report->daemon_pid == daemon_pid_ && started > daemon_started_s_ - 5 && started < daemon_started_s_ + 5;
    daemon_pid_ = report->daemon_pid;
    daemon_started_s_ = started;
  }
  std::map<std::string, std::array<uint32_t, 2>> held;  // slots pods hold, by GPU and resource
  for (SlotResource r : kResources)
    for (const std::string& id : in_use[static_cast<int>(r)])
      if (auto d = parse_device_id(id, r)) ++held[d->gpu][static_cast<int>(r)];
  if (report)
    for (const GpuReport& gpu : report->gpus)
      if (gpu.verified && gpus_.emplace(gpu.uuid, GpuSlots{}).second) {
        gpus_[gpu.uuid].last_current_s = now_s;
        messages_.push_back("GPU " + nvidia_uuid(gpu.uuid) + ": reported by tandemd");
      }
  for (auto& [uuid, g] : gpus_) {
    const GpuReport* current = nullptr;
    bool unverified = false;
    if (report)
      for (const GpuReport& gpu : report->gpus)
        if (gpu.uuid == uuid) {
          if (gpu.verified) current = &gpu;
          else unverified = true;  // as if not reported: it may not exist
        }
    const std::array<uint32_t, 2> h = held[uuid];
    const uint32_t used[2] = {h[0], h[1]};
    step_gpu(now_s, uuid, g, current, same_daemon, unverified, used);
  }
  rebuild(in_use);
}

void NodeSlots::step_gpu(double now_s, const std::string& uuid, GpuSlots& g, const GpuReport* report,
                         bool same_daemon, bool unverified, const uint32_t (&in_use)[2]) {
  const uint32_t before[2] = {g.counts[0].count(), g.counts[1].count()};
  const int bubble = static_cast<int>(SlotResource::bubble), slo = static_cast<int>(SlotResource::slo);
  // A young report (tandemd just started, or just met the GPU) says nothing yet: counts kept.
  const bool current = report && report->measured_s >= config_.fast_window_s;
  std::string why;
  if (current) {
    g.last_current_s = now_s;
    SlotBounds bounds[2];
    bounds[slo] = slo_bounds(*report, config_, in_use[slo]);
    g.counts[slo].step(now_s, bounds[slo], config_);
    bounds[bubble] = bubble_bounds(*report, config_, g.counts[slo].count());
    g.counts[bubble].step(now_s, bounds[bubble], config_);
    for (int r : {bubble, slo}) {
      if (bounds[r].error != g.errors[r] && !bounds[r].error.empty()) messages_.push_back("error: " + bounds[r].error);
      g.errors[r] = bounds[r].error;
    }
    why = "bubble share " + share_text(report->bubble_share) +
          (report->slo_policy ? ", training duty " + share_text(report->online.training_duty) : "");
  } else if (!report && same_daemon) {
    for (SlotCount& c : g.counts) c.clear();
    why = unverified ? "tandemd reports it unverified: no training or inference process named it"
                     : "tandemd no longer reports it: no process uses it";
  } else if (now_s - g.last_current_s > config_.stale_after_s) {
    for (SlotCount& c : g.counts) c.clear();
    why = "no current report from tandemd for " + share_text(now_s - g.last_current_s) + " s";
  }
  for (SlotResource r : kResources) {
    const int i = static_cast<int>(r);
    if (g.counts[i].count() != before[i])
      messages_.push_back("GPU " + nvidia_uuid(uuid) + ": " + resource_name(r) + " " + std::to_string(before[i]) + " -> " +
                          std::to_string(g.counts[i].count()) + " (" + why + ")");
  }
}

void NodeSlots::rebuild(const std::set<std::string> (&in_use)[2]) {
  for (SlotResource r : kResources) {
    const int i = static_cast<int>(r);
    const uint32_t max = r == SlotResource::bubble ? config_.bubble.max : config_.slo.max;
    std::vector<Device> list;
    for (const auto& [uuid, g] : gpus_) {
      uint32_t held = 0;
      for (uint32_t k = 0; k < max; ++k) held += in_use[i].count(device_id(uuid, r, k));
      uint32_t free_healthy = g.counts[i].count() > held ? g.counts[i].count() - held : 0;
      for (uint32_t k = 0; k < max; ++k) {
        Device d{device_id(uuid, r, k), false};
        if (in_use[i].count(d.id)) {
          d.healthy = true;
        } else if (free_healthy) {
          d.healthy = true;
          --free_healthy;
        }
        list.push_back(std::move(d));
      }
    }
    if (list != lists_[i]) {
      lists_[i] = std::move(list);
      ++versions_[i];
    }
  }
}

std::vector<std::string> NodeSlots::take_messages() {
  std::vector<std::string> out;
  out.swap(messages_);
  return out;
}

}  // namespace tandem::k8s
