#include "client_view.h"

#include <algorithm>
#include <cstring>

namespace tandem::scheduler {

static_assert(sizeof(tandem_client_page) % 8 == 0 && alignof(tandem_client_page) == 8,
              "a page is copied in 8-byte words");

tandem_client_page snapshot_page(const tandem_client_page* page) noexcept {
  uint64_t words[sizeof(tandem_client_page) / 8];
  const auto* from = reinterpret_cast<const uint64_t*>(page);
  for (size_t i = 0; i < sizeof words / 8; ++i) words[i] = __atomic_load_n(from + i, __ATOMIC_ACQUIRE);
  tandem_client_page copy;
  std::memcpy(&copy, words, sizeof copy);
  return copy;
}

namespace {

struct Bounder {
  ClientView& out;
  void flag(const char* field) {
    ++out.violations;
    out.last_violation = field;
  }
  // A counter: never backwards, at most `step` further per period.
  uint64_t counter(uint64_t previous, uint64_t raw, uint64_t step, const char* field) {
    if (raw < previous) return flag(field), previous;
    if (raw - previous > step) return flag(field), previous + step;
    return raw;
  }
  template <typename T>
  T at_most(T raw, T limit, const char* field) {
    if (raw > limit) return flag(field), limit;
    return raw;
  }
};

}  // namespace

void bound_client_view(ClientView& view, const tandem_client_page& raw, uint64_t now_ns, uint32_t control_seq) noexcept {
  const tandem_client_page p = view.v;  // the previous values (fields are overwritten below)
  tandem_client_page& v = view.v;
  Bounder b{view};
  using B = ClientBounds;
  v.launches = b.counter(p.launches, raw.launches, B::kLaunchesPerPeriod, "launches");
  v.nccl_launches = b.counter(p.nccl_launches, raw.nccl_launches, B::kLaunchesPerPeriod, "nccl_launches");
  v.issued_ns = b.counter(p.issued_ns, raw.issued_ns, B::kWorkNsPerPeriod, "issued_ns");
  v.markers_recorded = b.counter(p.markers_recorded, raw.markers_recorded, B::kLaunchesPerPeriod, "markers_recorded");
  v.markers_completed = b.counter(p.markers_completed, raw.markers_completed, B::kLaunchesPerPeriod, "markers_completed");
  v.completed_ns = b.counter(p.completed_ns, raw.completed_ns, B::kWorkNsPerPeriod, "completed_ns");
  v.nccl_markers_recorded =
      b.counter(p.nccl_markers_recorded, raw.nccl_markers_recorded, B::kLaunchesPerPeriod, "nccl_markers_recorded");
  v.nccl_markers_completed =
      b.counter(p.nccl_markers_completed, raw.nccl_markers_completed, B::kLaunchesPerPeriod, "nccl_markers_completed");
  v.p2p_markers_recorded =
      b.counter(p.p2p_markers_recorded, raw.p2p_markers_recorded, B::kLaunchesPerPeriod, "p2p_markers_recorded");
  v.p2p_markers_completed =
      b.counter(p.p2p_markers_completed, raw.p2p_markers_completed, B::kLaunchesPerPeriod, "p2p_markers_completed");
  v.tokens_taken_ns = b.counter(p.tokens_taken_ns, raw.tokens_taken_ns, B::kWorkNsPerPeriod, "tokens_taken_ns");
  v.gate_waits = b.counter(p.gate_waits, raw.gate_waits, B::kLaunchesPerPeriod, "gate_waits");
  v.gate_wait_ns = b.counter(p.gate_wait_ns, raw.gate_wait_ns, B::kWorkNsPerPeriod, "gate_wait_ns");
  v.inflight_fail_opens = static_cast<uint32_t>(
      b.counter(p.inflight_fail_opens, raw.inflight_fail_opens, B::kLaunchesPerPeriod, "inflight_fail_opens"));
  v.requests = b.counter(p.requests, raw.requests, B::kLaunchesPerPeriod, "requests");
  v.admission_waits = b.counter(p.admission_waits, raw.admission_waits, B::kLaunchesPerPeriod, "admission_waits");
  v.admission_wait_ns = b.counter(p.admission_wait_ns, raw.admission_wait_ns, B::kWorkNsPerPeriod, "admission_wait_ns");
  v.quota_refusals = b.counter(p.quota_refusals, raw.quota_refusals, B::kLaunchesPerPeriod, "quota_refusals");
  // What completed cannot exceed what was issued or recorded (each was bounded above first).
  // Not counted: the copy is not one atomic snapshot (see the header).
  v.markers_completed = std::min(v.markers_completed, v.markers_recorded);
  v.nccl_markers_completed = std::min(v.nccl_markers_completed, v.nccl_markers_recorded);
  v.p2p_markers_completed = std::min(v.p2p_markers_completed, v.p2p_markers_recorded);
  v.completed_ns = std::min(v.completed_ns, v.issued_ns);
  // Timestamps: never in the future (a reading just ahead of the daemon's clock is taken as now).
  auto timestamp = [&](uint64_t raw_ns, const char* field) {
    if (raw_ns <= now_ns) return raw_ns;
    if (raw_ns - now_ns > B::kClockSlackNs) b.flag(field);
    return now_ns;
  };
  v.last_launch_ns = timestamp(raw.last_launch_ns, "last_launch_ns");
  v.last_completion_ns = timestamp(raw.last_completion_ns, "last_completion_ns");
  v.heartbeat_ns = timestamp(raw.heartbeat_ns, "heartbeat_ns");
  v.request_activity_ns = timestamp(raw.request_activity_ns, "request_activity_ns");
  // Gauges: in range.
  v.peak_bytes = b.at_most(raw.peak_bytes, B::kMaxBytes, "peak_bytes");
  v.bytes_in_use = b.at_most(raw.bytes_in_use, B::kMaxBytes, "bytes_in_use");
  v.quota_bytes = b.at_most(raw.quota_bytes, B::kMaxBytes, "quota_bytes");
  // Only keeps memory from being taken from the process itself.
  v.working_set_bytes = b.at_most(raw.working_set_bytes, B::kMaxBytes, "working_set_bytes");
  v.memory_elastic = raw.memory_elastic ? 1 : 0;
  v.request_ns = b.at_most(raw.request_ns, B::kMaxDurationNs, "request_ns");
  v.latency_ns = b.at_most(raw.latency_ns, B::kMaxDurationNs, "latency_ns");
  v.requests_open = b.at_most(raw.requests_open, B::kMaxRequestsOpen, "requests_open");
  v.slo_us = b.at_most(raw.slo_us, B::kMaxSloUs, "slo_us");
  v.gate_want_us = b.at_most(raw.gate_want_us, static_cast<uint32_t>(B::kMaxDurationNs / 1000), "gate_want_us");
  v.device_sms = b.at_most(raw.device_sms, B::kMaxSms, "device_sms");
  v.sm_count = b.at_most(raw.sm_count, v.device_sms, "sm_count");
  // Unknown bits mean nothing; any set of live partitions is one a process may hold.
  v.training_flags = raw.training_flags & (TANDEM_TRAINING_COLLECTIVES_HELD | TANDEM_TRAINING_MPS | TANDEM_TRAINING_LIVE_MASK);
  // A latency for an interval that has not begun is no measurement: the last one stands.
  if (raw.latency_seq > control_seq) {
    b.flag("latency_seq");
    v.latency_seq = p.latency_seq;
    v.latency_ns = p.latency_ns;
    v.latency_samples = p.latency_samples;
  } else {
    v.latency_seq = raw.latency_seq;
    v.latency_samples = raw.latency_samples;
  }
  v.progress_wake = raw.progress_wake;  // the client's own futex word: read by nobody else
  // Zico: a start count is only compared with the permits the daemon gave (any value is
  // harmless); the waiting flag is 0 or 1.
  v.zico_starts = raw.zico_starts;
  v.zico_waiting = raw.zico_waiting ? 1 : 0;
  v.zico_wait_ns = b.counter(p.zico_wait_ns, raw.zico_wait_ns, B::kWorkNsPerPeriod, "zico_wait_ns");
  // A job's ranks: a count too high only releases the job's held collectives (fail open).
  v.collectives_launched =
      b.counter(p.collectives_launched, raw.collectives_launched, B::kLaunchesPerPeriod, "collectives_launched");
  v.collective_waiting = raw.collective_waiting;
  // Any width is harmless: it only narrows training's partition while this client's requests
  // run, which a client over its target does anyway.
  v.request_blocks = raw.request_blocks;
}

}  // namespace tandem::scheduler
