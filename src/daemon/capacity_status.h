// A GPU's room for Kubernetes slots, its "capacity" in `tandemctl status --json`, which
// tandem-device-plugin reads (docs/kubernetes.md): the share of its time fillers can use
// (gpu_capacity.h), its memory and what training holds at its peak, its online clients'
// headroom against their latency targets and the slo policy's state, and its pressure.
// Raw measures: the plugin turns them into slot counts.
#pragma once
#include <nlohmann/json.hpp>

#include "gpu_scheduler.h"

namespace tandem::scheduler {

nlohmann::json capacity_status(const GpuScheduler& g);

}  // namespace tandem::scheduler
