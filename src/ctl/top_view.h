// What `tandemctl top` shows, computed from two of tandemd's status documents taken an interval
// apart (rates need two), and its rendering as lines that fit a terminal. No I/O here: the
// command (top_command.cpp) samples and draws, the unit tests feed documents.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::ctl {

// The view as `top --json` prints it:
//   daemon     {pid, version, policy, uptime_s}
//   interval_s seconds between the two documents (0: only one, no rates yet)
//   gpus       per GPU: uuid, policy, phase, bubble_use, training_retained, slo_target_ms,
//              latency_ms (the TANDEM_SLO_PCTL-th percentile, 99 by default), bytes_in_use,
//              quota_bytes, pooled_bytes; figures that cannot be known are null
//   processes  per registered process: pid, role, uid, container, gpu, launches_per_s,
//              gate_waits, gate_wait_ms, bytes_in_use, quota_bytes, pool_bytes
// `previous` may be null (the first sample, or the daemon restarted in between): rates are null.
nlohmann::json top_view(const nlohmann::json& previous, const nlohmann::json& current, double interval_s);

// The screen: a header line, the GPU table, the process table, each line cut to `width`
// columns and the whole to `height` lines (the processes that do not fit are counted in the
// last line). `notice` (e.g. "tandemd is not answering ...") replaces the tables when not empty.
std::vector<std::string> top_lines(const nlohmann::json& view, const std::string& notice, int width, int height);

}  // namespace tandem::ctl
