// tandemd's Prometheus page (docs/metrics.md lists every family): the same sources as the
// status document (server.cpp), read in the daemon's loop between ticks. Per GPU: its state
// and where its time went, the bubble profile, the policies' figures, the memory pool; per
// registered process (labels gpu, pid, role, uid, container, pod): its launches, gate, tokens,
// requests, latency, target and memory, as the daemon's bounded view of its page says
// (client_view.h); per role, the totals of the processes that departed (departed.h). Every
// family is announced even when it has no sample yet.
#include <unistd.h>

#include "server.h"

#ifndef TANDEM_VERSION_STRING
#define TANDEM_VERSION_STRING "0.0.0"
#endif

namespace tandem::scheduler {

namespace {

using Type = MetricsWriter::Type;
constexpr double kNs = 1e-9;

struct ProcessRow {
  MetricLabels labels;
  const tandem_client_page* page;
  const tandem_slot* slot;
  uint64_t violations;
  uint64_t pooled_bytes;
};

const char* state_name(GpuState s) {
  switch (s) {
    case GpuState::busy: return "busy";
    case GpuState::bubble: return "bubble";
    case GpuState::no_training: return "no_training";
  }
  return "?";
}

void per_process(MetricsWriter& w, const std::vector<ProcessRow>& rows, std::string_view name, Type type,
                 std::string_view help, double (*value)(const ProcessRow&)) {
  w.family(name, type, help);
  for (const ProcessRow& r : rows) w.sample(r.labels, value(r));
}

void process_families(MetricsWriter& w, const std::vector<ProcessRow>& rows) {
  w.family("tandem_process_launches_total", Type::counter,
           "Kernels a registered process launched, by kind: compute (graph nodes included) or nccl (collectives).");
  for (const ProcessRow& r : rows) {
    MetricLabels l = r.labels;
    l.emplace_back("kind", "compute");
    w.sample(l, static_cast<double>(r.page->launches));
    l.back().second = "nccl";
    w.sample(l, static_cast<double>(r.page->nccl_launches));
  }
  per_process(w, rows, "tandem_process_gate_waits_total", Type::counter,
              "Launches of a gated process that waited at the token gate.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->gate_waits); });
  per_process(w, rows, "tandem_process_gate_wait_seconds_total", Type::counter,
              "Time launches of a gated process waited at the token gate.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->gate_wait_ns) * kNs; });
  per_process(w, rows, "tandem_process_tokens_granted_seconds_total", Type::counter,
              "Tokens (estimated GPU seconds) tandemd granted the process.",
              [](const ProcessRow& r) { return static_cast<double>(r.slot->granted_ns) * kNs; });
  per_process(w, rows, "tandem_process_tokens_spent_seconds_total", Type::counter,
              "Tokens (estimated GPU seconds) the process spent on launches.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->tokens_taken_ns) * kNs; });
  per_process(w, rows, "tandem_process_token_balance_seconds", Type::gauge,
              "Tokens the process may still spend (negative: overdrawn by a launch in flight).", [](const ProcessRow& r) {
                return static_cast<double>(static_cast<int64_t>(r.slot->token_limit_ns - r.page->tokens_taken_ns)) * kNs;
              });
  per_process(w, rows, "tandem_process_gpu_work_issued_seconds_total", Type::counter,
              "Estimated GPU time of the kernels the process launched.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->issued_ns) * kNs; });
  per_process(w, rows, "tandem_process_gpu_work_completed_seconds_total", Type::counter,
              "Estimated GPU time of the launched kernels the GPU has finished (completion markers).",
              [](const ProcessRow& r) { return static_cast<double>(r.page->completed_ns) * kNs; });
  per_process(w, rows, "tandem_process_requests_total", Type::counter,
              "Online inference: requests seen (reported, or the launches between two host synchronizations).",
              [](const ProcessRow& r) { return static_cast<double>(r.page->requests); });
  per_process(w, rows, "tandem_process_requests_open", Type::gauge, "Online inference: requests begun and not yet ended.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->requests_open); });
  per_process(w, rows, "tandem_process_request_gpu_seconds", Type::gauge,
              "Online inference: the learned GPU time of one request.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->request_ns) * kNs; });
  per_process(w, rows, "tandem_process_admission_waits_total", Type::counter,
              "Online inference under policy fill: requests that waited for a bubble long enough to hold them.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->admission_waits); });
  per_process(w, rows, "tandem_process_admission_wait_seconds_total", Type::counter,
              "Online inference under policy fill: time requests waited for a bubble.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->admission_wait_ns) * kNs; });
  per_process(w, rows, "tandem_process_latency_seconds", Type::gauge,
              "Online inference: the TANDEM_SLO_PCTL-th percentile (default 99th) of request latency over the last "
              "control interval, as the process measured it (0: none measured yet).",
              [](const ProcessRow& r) { return static_cast<double>(r.page->latency_ns) * kNs; });
  per_process(w, rows, "tandem_process_latency_samples", Type::gauge,
              "Online inference: requests the latency percentile was computed from.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->latency_samples); });
  per_process(w, rows, "tandem_process_slo_target_seconds", Type::gauge,
              "Online inference: its latency target (TANDEM_SLO_MS; 0 for other roles).",
              [](const ProcessRow& r) { return static_cast<double>(r.page->slo_us) * 1e-6; });
  per_process(w, rows, "tandem_process_memory_used_bytes", Type::gauge, "Device memory the process holds now.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->bytes_in_use); });
  per_process(w, rows, "tandem_process_memory_peak_bytes", Type::gauge, "The largest device memory the process held.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->peak_bytes); });
  per_process(w, rows, "tandem_process_memory_quota_bytes", Type::gauge,
              "The memory quota in force for the process (0: none).",
              [](const ProcessRow& r) { return static_cast<double>(r.page->quota_bytes); });
  per_process(w, rows, "tandem_process_memory_pooled_bytes", Type::gauge,
              "Memory pool chunks the process holds (TANDEM_MEM_POOL=1).",
              [](const ProcessRow& r) { return static_cast<double>(r.pooled_bytes); });
  per_process(w, rows, "tandem_process_memory_quota_refusals_total", Type::counter,
              "Allocations refused with out-of-memory for exceeding the quota.",
              [](const ProcessRow& r) { return static_cast<double>(r.page->quota_refusals); });
  per_process(w, rows, "tandem_process_page_violations_total", Type::counter,
              "Values in the process's shared page that tandemd had to bound (a process that is not a real tandem client).",
              [](const ProcessRow& r) { return static_cast<double>(r.violations); });
}

}  // namespace

std::string Server::metrics_text() const {
  const uint64_t now = monotonic_ns();
  MetricsWriter w;
  w.family("tandem_build_info", Type::gauge, "Always 1: the daemon's version and scheduling policy as labels.");
  w.sample({{"version", TANDEM_VERSION_STRING}, {"policy", options_.policy}}, 1);
  w.family("tandem_daemon_uptime_seconds", Type::gauge, "Seconds since tandemd started serving.");
  w.sample({}, static_cast<double>(now - started_ns_) * kNs);
  w.family("tandem_daemon_connections", Type::gauge, "Connections to tandemd's socket (registered or not).");
  w.sample({}, static_cast<double>(registry_.size()));
  w.family("tandem_daemon_tick_duration_seconds", Type::histogram,
           "How long one scheduling tick of every GPU and the memory pool took.");
  tick_seconds_.write(w, {});
  w.family("tandem_daemon_ticks_late_total", Type::counter,
           "Ticks that began a whole sample period or more after they were due.");
  w.sample({}, static_cast<double>(ticks_late_));
  const MetricsHttp::Counts& h = metrics_.counts();
  w.family("tandem_metrics_requests_total", Type::counter, "Requests to this metrics endpoint, by HTTP status code.");
  w.sample({{"code", "200"}}, static_cast<double>(h.pages));
  w.sample({{"code", "400"}}, static_cast<double>(h.bad_requests));
  w.sample({{"code", "404"}}, static_cast<double>(h.not_found));
  w.sample({{"code", "431"}}, static_cast<double>(h.too_large));
  w.family("tandem_metrics_renders_total", Type::counter,
           "Pages rendered: at most one per 100 ms, however many scrapes ask (a page younger is served again).");
  w.sample({}, static_cast<double>(h.renders));
  w.family("tandem_metrics_page_waits_total", Type::counter,
           "Scrapes that waited for their turn: at most 20 pages a second are sent, in the order they were asked for.");
  w.sample({}, static_cast<double>(h.page_waits));
  w.family("tandem_metrics_connections_dropped_total", Type::counter,
           "Metrics connections closed unanswered: timeout (request or response too slow) or evicted (connection cap).");
  w.sample({{"reason", "timeout"}}, static_cast<double>(h.timeouts));
  w.sample({{"reason", "evicted"}}, static_cast<double>(h.evicted));

  // Per GPU.
  const auto gpu_gauge = [&](std::string_view name, Type type, std::string_view help, auto value) {
    w.family(name, type, help);
    for (const auto& [uuid, g] : gpus_) w.sample({{"gpu", uuid}}, value(*g));
  };
  w.family("tandem_gpu_clients", Type::gauge, "Registered processes on the GPU, by role.");
  for (const auto& [uuid, g] : gpus_) {
    std::map<std::string, size_t> by_role{{"training", 0}, {"inference", 0}, {"batch-inference", 0}};
    for (const auto& [id, c] : registry_.clients())
      if (c.gpu == uuid && c.slot >= 0) ++by_role[c.role];
    for (const auto& [role, n] : by_role) w.sample({{"gpu", uuid}, {"role", role}}, static_cast<double>(n));
  }
  w.family("tandem_gpu_state", Type::gauge,
           "1 for the GPU's state at the last tick: busy (training computes), bubble (training left it idle), no_training.");
  for (const auto& [uuid, g] : gpus_) {
    GpuState now_state = const_cast<GpuScheduler&>(*g).segment().shm()->gpu_phase == TANDEM_GPU_NO_TRAINING ? GpuState::no_training
                         : g->gpu_phase() == GpuPhase::bubble ? GpuState::bubble : GpuState::busy;
    for (GpuState s : {GpuState::busy, GpuState::bubble, GpuState::no_training})
      w.sample({{"gpu", uuid}, {"state", state_name(s)}}, s == now_state ? 1 : 0);
  }
  w.family("tandem_gpu_state_seconds_total", Type::counter,
           "Seconds the GPU spent in each state (bubble: training's idle time, which fillers may use).");
  for (const auto& [uuid, g] : gpus_)
    for (GpuState s : {GpuState::busy, GpuState::bubble, GpuState::no_training})
      w.sample({{"gpu", uuid}, {"state", state_name(s)}}, g->usage().seconds(s));
  w.family("tandem_gpu_others_work_seconds_total", Type::counter,
           "Estimated GPU time the processes other than training completed, by the GPU's state meanwhile "
           "(in state bubble: bubble time used).");
  for (const auto& [uuid, g] : gpus_)
    for (GpuState s : {GpuState::busy, GpuState::bubble, GpuState::no_training})
      w.sample({{"gpu", uuid}, {"state", state_name(s)}}, g->usage().others_work_seconds(s));
  gpu_gauge("tandem_gpu_bubble_use_ratio", Type::gauge,
            "Share of training's bubble time the other processes' GPU work used, over the last ~10 s (NaN: no bubble).",
            [](const GpuScheduler& g) { return g.usage().bubble_use(); });
  gpu_gauge("tandem_training_retained_ratio", Type::gauge,
            "Estimated share of its own speed training keeps beside the others, over the last ~10 s (NaN: no training).",
            [](const GpuScheduler& g) { return g.usage().training_retained(); });
  gpu_gauge("tandem_gpu_bubbles_total", Type::counter, "Training bubbles that ended (the iteration profile learns from them).",
            [](const GpuScheduler& g) { return static_cast<double>(g.detector().bubbles()); });
  gpu_gauge("tandem_gpu_bubble_mean_seconds", Type::gauge, "Training's mean bubble length (moving average).",
            [](const GpuScheduler& g) { return static_cast<double>(g.detector().mean_bubble_ns()) * kNs; });
  gpu_gauge("tandem_gpu_bubble_longest_seconds", Type::gauge, "Training's longest bubble so far.",
            [](const GpuScheduler& g) { return static_cast<double>(g.detector().longest_bubble_ns()) * kNs; });
  gpu_gauge("tandem_gpu_busy_mean_seconds", Type::gauge, "Training's mean busy phase (moving average).",
            [](const GpuScheduler& g) { return static_cast<double>(g.detector().mean_busy_ns()) * kNs; });
  gpu_gauge("tandem_gpu_communicating", Type::gauge, "1 while training's collectives (NCCL kernels other than point-to-point) run.",
            [](const GpuScheduler& g) { return g.communicating() ? 1.0 : 0.0; });
  gpu_gauge("tandem_gpu_admission_refusals", Type::gauge,
            "Colocations the admission checks refuse now (summed peak memory over the GPU, a request longer than any bubble).",
            [](const GpuScheduler& g) { return static_cast<double>(g.refusals().size()); });
  gpu_gauge("tandem_gpu_memory_total_bytes", Type::gauge, "The GPU's memory, as its first trusted client reported it.",
            [](const GpuScheduler& g) { return static_cast<double>(const_cast<GpuScheduler&>(g).segment().shm()->gpu_total_bytes); });

  // Room for Kubernetes slots and the pressure on it (docs/kubernetes.md).
  gpu_gauge("tandem_gpu_bubble_share_ratio", Type::gauge,
            "Share of the GPU's time fillers could use beside training, over the short window (slots.fast_window_s).",
            [](const GpuScheduler& g) { return g.capacity().bubble_share(); });
  gpu_gauge("tandem_gpu_pressure_ratio", Type::gauge,
            "How far the GPU's fillers exceed the room it had over the long window (slots.window_s): 0 they fit, 1 none.",
            [](const GpuScheduler& g) { return g.capacity().pressure(); });
  w.family("tandem_node_pressure_ratio", Type::gauge,
           "The node's pressure, its GPUs' most: what a descheduler moves best-effort pods away on (deploy/kubernetes/descheduler).");
  w.sample({}, node_pressure());

  // Policy slo (GPUs under fill have no sample).
  const auto slo_gauge = [&](std::string_view name, Type type, std::string_view help, auto value) {
    w.family(name, type, help);
    for (const auto& [uuid, g] : gpus_)
      if (g->policy() == TANDEM_POLICY_SLO) w.sample({{"gpu", uuid}}, value(g->slo()));
  };
  slo_gauge("tandem_slo_active", Type::gauge, "Policy slo: 1 while online inference is active and training is gated.",
            [](const SloPolicy& p) { return p.active() ? 1.0 : 0.0; });
  slo_gauge("tandem_slo_training_duty_ratio", Type::gauge,
            "Policy slo: training's duty cycle, the share of each period it may use the GPU while inference is active.",
            [](const SloPolicy& p) { return p.duty(); });
  slo_gauge("tandem_slo_saturated", Type::gauge,
            "Policy slo: 1 when inference is over its target with training already at the minimum duty cycle.",
            [](const SloPolicy& p) { return p.controller().saturated() ? 1.0 : 0.0; });
  slo_gauge("tandem_slo_inflight_bound_seconds", Type::gauge,
            "Policy slo: training's work allowed in flight while inference is active.",
            [](const SloPolicy& p) { return static_cast<double>(p.inflight_bound_ns()) * kNs; });
  slo_gauge("tandem_slo_control_periods_total", Type::counter, "Policy slo: control periods run by the latency controller.",
            [](const SloPolicy& p) { return static_cast<double>(p.control_seq() - 1); });

  // The memory pool, per GPU.
  const auto pool_gauge = [&](std::string_view name, Type type, std::string_view help, auto value) {
    w.family(name, type, help);
    for (const auto& [uuid, g] : gpus_) {
      auto f = pool_figures_.find(uuid);
      static const PoolFigures kNone;
      w.sample({{"gpu", uuid}}, value(pool_.totals(uuid), f == pool_figures_.end() ? kNone : f->second));
    }
  };
  using Totals = MemoryPool::Totals;
  pool_gauge("tandem_pool_chunks", Type::gauge, "Memory pool chunks tandemd keeps for the GPU.",
             [](const Totals& t, const PoolFigures&) { return static_cast<double>(t.chunks); });
  pool_gauge("tandem_pool_bytes", Type::gauge, "Bytes of the memory pool's chunks.",
             [](const Totals& t, const PoolFigures&) { return static_cast<double>(t.bytes); });
  pool_gauge("tandem_pool_free_bytes", Type::gauge, "Bytes of chunks no process holds.",
             [](const Totals& t, const PoolFigures&) { return static_cast<double>(t.free_bytes); });
  pool_gauge("tandem_pool_orphaned_bytes", Type::gauge,
             "Bytes of chunks whose process closed its connection but has not exited yet.",
             [](const Totals& t, const PoolFigures&) { return static_cast<double>(t.orphaned_bytes); });
  pool_gauge("tandem_pool_handovers_total", Type::counter,
             "Inference acquisitions served in full by chunks training gave back.",
             [](const Totals&, const PoolFigures& f) { return static_cast<double>(f.handovers); });
  pool_gauge("tandem_pool_short_answers_total", Type::counter,
             "Inference acquisitions answered short: training did not release enough in time.",
             [](const Totals&, const PoolFigures& f) { return static_cast<double>(f.short_answers); });
  w.family("tandem_pool_handover_duration_seconds", Type::histogram,
           "From an inference process's acquisition to its answer, for those that waited for training.");
  for (const auto& [uuid, g] : gpus_) {
    auto f = pool_figures_.find(uuid);
    (f == pool_figures_.end() ? PoolFigures{}.durations : f->second.durations).write(w, {{"gpu", uuid}});
  }

  // Per registered process.
  const auto pooled = pool_bytes_by_slot();
  std::vector<ProcessRow> rows;
  for (const auto& [id, c] : registry_.clients()) {
    if (c.slot < 0 || c.gpu.empty()) continue;
    auto g = gpus_.find(c.gpu);
    if (g == gpus_.end()) continue;
    const GpuSegment& segment = const_cast<GpuScheduler&>(*g->second).segment();
    const tandem_slot& s = segment.shm()->slots[c.slot];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) continue;
    const ClientView& view = segment.view(c.slot);
    auto p = pooled.find({c.gpu, c.slot});
    rows.push_back({{{"gpu", c.gpu}, {"pid", std::to_string(c.pid)}, {"role", c.role}, {"uid", std::to_string(c.uid)},
                     {"container", c.peer.container.id}, {"pod", c.peer.container.pod}},
                    &view.v, &s, view.violations, p == pooled.end() ? 0 : p->second});
  }
  process_families(w, rows);

  // Departed processes, by role (departed.h): what the per-process series of processes no
  // longer registered said last. Summed with those of the live ones they never decrease.
  const auto& departed = departed_.totals();
  w.family("tandem_departed_processes_total", Type::counter,
           "Processes with a GPU slot whose connection to tandemd closed (exited, or killed), by role.");
  for (const auto& [role, t] : departed) w.sample({{"role", role}}, static_cast<double>(t.processes));
  w.family("tandem_departed_launches_total", Type::counter,
           "Kernels the departed processes launched, by role and kind: compute (graph nodes included) or nccl.");
  for (const auto& [role, t] : departed) {
    w.sample({{"role", role}, {"kind", "compute"}}, static_cast<double>(t.launches));
    w.sample({{"role", role}, {"kind", "nccl"}}, static_cast<double>(t.nccl_launches));
  }
  w.family("tandem_departed_gpu_work_completed_seconds_total", Type::counter,
           "Estimated GPU time of the departed processes' kernels the GPU finished, by role.");
  for (const auto& [role, t] : departed) w.sample({{"role", role}}, static_cast<double>(t.completed_ns) * kNs);
  return w.text();
}

}  // namespace tandem::scheduler
