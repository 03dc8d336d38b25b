#include "slo_status.h"

#include <string>
#include <vector>

namespace tandem::scheduler {

namespace {
double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }
std::string ms_text(uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f ms", ms(ns));
  return b;
}
}  // namespace

nlohmann::json live_partitions(const tandem_client_page& page) {
  uint8_t pcts[TANDEM_LIVE_PARTITIONS];
  unsigned n = live_levels(page.training_flags, pcts);
  return nlohmann::json(std::vector<uint8_t>(pcts, pcts + n));
}

nlohmann::json slo_floor_status(const GpuScheduler& g, const SloPolicy& p) {
  GpuScheduler::SloFloor f = g.slo_floor();
  nlohmann::json levels = nlohmann::json::array();
  const PartitionController& pc = p.partition();
  for (int i = 0; p.live() && i < pc.levels(); ++i)
    levels.push_back({{"pct", pc.level_pct_at(i)}, {"latency_ratio", pc.remembered(i)}});
  nlohmann::json out = {{"gating", p.gating()},
                        {"spatial", p.spatial()},
                        {"live", p.live()},
                        {"partition_pct", p.partition_pct()},
                        {"partition_levels", levels},
                        // The highest partition training may take: what the requests' widest
                        // kernel leaves (100: no ceiling; partition_controller.h).
                        {"partition_ceiling_pct", p.live() ? pc.level_pct_at(pc.ceiling()) : 0},
                        {"requests_unheld", p.requests_unheld()},
                        {"busy_fraction", p.busy_fraction()},
                        {"predicted_cuts", p.predicted_cuts()},
                        {"collectives_held", f.collectives_held},
                        {"longest_collective_ms", ms(g.longest_collective_ns())},
                        {"floor_ms", ms(f.total())},
                        {"floor", {{"request_ms", ms(f.request_ns)}, {"inflight_ms", ms(f.inflight_ns)},
                                   {"collective_ms", ms(f.collective_ns)}}},
                        {"below_floor", false},
                        {"below_floor_why", ""}};
  if (f.tightest_target_ns && f.request_ns && f.tightest_target_ns < f.total()) {
    std::string why = "the target " + ms_text(f.tightest_target_ns) + " is below what the policy can reach, " +
                      ms_text(f.total()) + ": a request's own " + ms_text(f.request_ns);
    if (f.collective_ns)
      why += " + training's collective of " + ms_text(f.collective_ns) +
             ", never held back (its peers would stall; TANDEM_JOB_LOCAL=1 if all ranks are on this node)";
    if (f.inflight_ns) why += " + training's work in flight at the lowest duty cycle, " + ms_text(f.inflight_ns);
    out["below_floor"] = true;
    out["below_floor_why"] = why;
  }
  return out;
}

}  // namespace tandem::scheduler
