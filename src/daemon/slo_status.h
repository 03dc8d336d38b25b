// The slo policy's part of `tandemctl status --json`: besides the controller's state, what the
// policy can reach on this GPU (its floor, from what it sees) and, when the tightest latency
// target lies below it, why.
#pragma once
#include <nlohmann/json.hpp>

#include "gpu_scheduler.h"

namespace tandem::scheduler {

nlohmann::json slo_floor_status(const GpuScheduler& g, const SloPolicy& p);
// A training client's live SM partitions (percentages), as its page's flags say.
nlohmann::json live_partitions(const tandem_client_page& page);

}  // namespace tandem::scheduler
