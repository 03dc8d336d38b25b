// The scheduler's trace (src/scheduler/trace.h) as a Chrome trace, the document `tandemctl
// trace` writes and ui.perfetto.dev opens: bubbles as intervals on the GPU's training track,
// token grants and revocations per filler, Zico's permitted iteration starts per training job.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "trace.h"

namespace tandem::scheduler {

// The events at or after `since_ns` of GPU `gpu` (its name in the trace).
nlohmann::json chrome_trace(const Trace& trace, uint64_t since_ns, const std::string& gpu);

}  // namespace tandem::scheduler
