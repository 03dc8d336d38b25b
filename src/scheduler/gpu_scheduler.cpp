#include "gpu_scheduler.h"

#include <algorithm>
#include <ctime>

#include "futex.h"
#include "log.h"

namespace tandem::scheduler {

namespace {
bool gated(uint32_t role) { return role == TANDEM_ROLE_BATCH_INFERENCE; }

void wake(tandem_slot& s) { futex_bump_and_wake(&s.wake); }
}  // namespace

GpuScheduler::GpuScheduler(const std::string& uuid, const SchedulerParams& params)
    : params_(params), segment_(uuid), detector_(params.quiet_samples), policy_(params.fill), slo_(params.slo),
      holds_({RequestHoldParams{}.window_ns,
              params.policy == TANDEM_POLICY_SLO ? params.slo.controller.min_duty : 1.0 - params.fill.online_hold}),
      zico_(params.period_ns, params.zico_profile_ns),
      capacity_(params.slots) {
  if (segment_.ok()) {
    segment_.shm()->sample_us = params.period_ns / 1000;
    segment_.shm()->policy = params.policy;
    segment_.shm()->control_seq = slo_.control_seq();
    segment_.shm()->training_duty_ppm = 1000000;
    // Alive from the start: a client registering before the first tick must not see a stale daemon.
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    segment_.shm()->daemon_heartbeat_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  }
}

namespace {
// The balance as the daemon counts it: what it allowed minus what the client (bounded) spent.
int64_t balance(const tandem_slot& s, const ClientView& c) {
  return static_cast<int64_t>(__atomic_load_n(&s.token_limit_ns, __ATOMIC_ACQUIRE) - c.v.tokens_taken_ns);
}

FillerState gated_state(int id, const tandem_slot& s, const ClientView& c) {
  // bounded: completed <= issued
  return {id, c.v.issued_ns - c.v.completed_ns, balance(s, c), true, uint64_t{c.v.gate_want_us} * 1000};
}

OnlineClient online_state(int id, const tandem_slot& s, const ClientView& c) {
  OnlineClient o;
  o.id = id;
  o.generation = s.generation;
  o.requests = c.v.requests;
  o.request_ns = c.v.request_ns;
  o.requests_open = c.v.requests_open;
  o.activity_ns = c.v.request_activity_ns;
  o.latency_seq = c.v.latency_seq;
  o.latency_ns = c.v.latency_ns;
  o.samples = c.v.latency_samples;
  o.slo_ns = static_cast<uint64_t>(c.v.slo_us) * 1000;
  if (c.v.request_blocks && c.v.device_sms)
    o.width_pct = static_cast<uint32_t>(std::min<uint64_t>(100, (100ull * c.v.request_blocks + c.v.device_sms - 1) / c.v.device_sms));
  return o;
}

// Other clients read an online client's requests through the daemon's slot (they cannot
// read its page): the requests that hold best-effort work now, `holding` (request_holds.h:
// none when they are stuck or past the floor). A fall wakes the launches waiting for it.
void publish_requests(tandem_shm_header* shm, tandem_slot& s, const ClientView& c, uint32_t holding) {
  uint32_t before = __atomic_load_n(&s.requests_open, __ATOMIC_RELAXED);
  __atomic_store_n(&s.slo_us, c.v.slo_us, __ATOMIC_RELAXED);
  __atomic_store_n(&s.request_activity_ns, c.v.request_activity_ns, __ATOMIC_RELEASE);
  __atomic_store_n(&s.requests_open, holding, __ATOMIC_RELEASE);
  if (holding < before) futex_bump_and_wake(&shm->request_seq);
}
}  // namespace

void GpuScheduler::set_gates(tandem_shm_header* shm, const std::vector<FillerState>& clients, uint32_t gate) {
  for (const FillerState& f : clients) {
    tandem_slot& s = shm->slots[f.id];
    if (__atomic_exchange_n(&s.gate, gate, __ATOMIC_ACQ_REL) != gate && gate == TANDEM_GATE_OPEN) wake(s);
  }
}

void GpuScheduler::publish_live_partition(tandem_shm_header* shm, bool slo_training) {
  // While a request pins it (slo_policy.h: stuck clients' requests were cleared by the request
  // holds this tick, and one left open pins it for about a second at most).
  uint32_t pct = slo_training ? slo_.applied_partition_pct() : 0;
  // On its partition training's queued work cannot slow the request, but what is still queued
  // there when the request ends runs on those SMs alone while the others idle (a kernel once
  // launched stays where it was put): the same wall time of work as between requests, scaled to
  // the partition's SMs (the work's cost is counted at every SM). Without the bound, training
  // kept 0.72-0.73 of Exclusive on a fixed 50% partition; with it 0.80-0.82 (docs/slo.md).
  uint64_t bound = pct ? slo_.inflight_share_ns(training_.size()) * pct / 100 : 0;
  for (const FillerState& f : training_) {
    __atomic_store_n(&shm->slots[f.id].live_partition, pct, __ATOMIC_RELEASE);
    if (pct) __atomic_store_n(&shm->slots[f.id].inflight_bound_ns, std::max<uint64_t>(bound, 1), __ATOMIC_RELEASE);
  }
}

void GpuScheduler::set_inflight_bounds(tandem_shm_header* shm, const std::vector<FillerState>& clients, uint64_t ns) {
  for (const FillerState& f : clients) __atomic_store_n(&shm->slots[f.id].inflight_bound_ns, ns, __ATOMIC_RELEASE);
}

void GpuScheduler::apply(tandem_shm_header* shm, const std::vector<Grant>& grants, uint64_t now_ns) {
  for (const Grant& g : grants) {
    tandem_slot& s = shm->slots[g.id];
    __atomic_fetch_add(&s.token_limit_ns, static_cast<uint64_t>(g.tokens_ns), __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&s.granted_ns, static_cast<uint64_t>(g.tokens_ns), __ATOMIC_RELAXED);
    wake(s);
    trace_.add({now_ns, 'G', s.pid, g.tokens_ns});
  }
}

void GpuScheduler::tick(uint64_t now_ns) {
  tandem_shm_header* shm = segment_.shm();
  if (!shm) return;
  __atomic_store_n(&shm->daemon_heartbeat_ns, now_ns, __ATOMIC_RELEASE);
  segment_.sample(now_ns);

  TrainingSample sample{now_ns, 0, 0, 0};
  // NCCL markers recorded but not passed: all, and those behind a collective (not only
  // point-to-point kernels).
  uint64_t nccl_pending = 0, collectives_pending = 0;
  uint64_t inference_slots = 0;
  uint64_t others_work = 0;  // GPU work the non-training clients completed since the last tick
  // The training clients' completion markers passed (their pages' sum): those behind gated
  // launches and the progress thread's, one a tick behind the last launch with the gate open.
  uint64_t training_completed = 0;
  bool spatial = true;  // every training client's context limited to part of the SMs (MPS)
  bool live = true;     // every training client an MPS client holding the same live partitions
  uint32_t live_mask = 0;
  uint8_t live_pcts[TANDEM_LIVE_PARTITIONS] = {};
  bool held = true;     // every training client's collectives may be held
  uint64_t slowest_request = 0, tightest_target = 0;
  fillers_.clear();
  training_.clear();
  online_.clear();
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
    tandem_slot& s = shm->slots[i];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) continue;
    const ClientView& c = segment_.view(static_cast<int>(i));
    sharing_.observe(static_cast<int>(i), s.generation, c.v);
    if (s.role != TANDEM_ROLE_TRAINING) others_work += others_work_since(s, static_cast<int>(i), c);
    if (s.role == TANDEM_ROLE_TRAINING) {
      training_.push_back(gated_state(static_cast<int>(i), s, c));
      training_completed += c.v.markers_completed;
      spatial = spatial && c.v.sm_count > 0 && c.v.sm_count < c.v.device_sms;
      uint32_t mask = c.v.training_flags & TANDEM_TRAINING_LIVE_MASK;
      live = live && (c.v.training_flags & TANDEM_TRAINING_MPS) && mask && (!live_mask || mask == live_mask);
      live_mask = mask;
      held = held && (c.v.training_flags & TANDEM_TRAINING_COLLECTIVES_HELD);
      sample.launches += c.v.launches;
      sample.markers_recorded += c.v.markers_recorded;
      sample.markers_completed += c.v.markers_completed;
      const uint64_t nccl = c.v.nccl_markers_recorded - c.v.nccl_markers_completed;  // bounded: >= 0
      const uint64_t p2p = c.v.p2p_markers_recorded - c.v.p2p_markers_completed;
      nccl_pending += nccl;
      collectives_pending += nccl - std::min(nccl, p2p);  // per client: one's skew hides no other's
    } else if (gated(s.role)) {
      fillers_.push_back(gated_state(static_cast<int>(i), s, c));
      fillers_.back().wants_work = filler_wants_work(s, static_cast<int>(i), c, now_ns);
    } else if (s.role == TANDEM_ROLE_INFERENCE) {
      inference_slots |= 1ull << i;
      online_.push_back(online_state(static_cast<int>(i), s, c));
      slowest_request = std::max(slowest_request, c.v.request_ns);
      if (c.v.slo_us && (!tightest_target || c.v.slo_us * 1000ull < tightest_target)) tightest_target = c.v.slo_us * 1000ull;
    }
  }
  sharing_.publish(shm);
  // A collective in flight is the fill policy's communication phase; a point-to-point kernel
  // (a pipeline stage's receive, waiting for its peer) is not: its wait is an ordinary bubble,
  // learned and predicted with the others (docs/scheduler.md, "Pipeline parallelism").
  sample.communicating = collectives_pending > 0;
  const bool training = !training_.empty();
  collectives_held_ = training && held;
  slowest_request_ns_ = slowest_request;
  tightest_target_ns_ = tightest_target;
  __atomic_store_n(&shm->inference_slots, inference_slots, __ATOMIC_RELEASE);

  // Which requests may hold the best-effort job (stuck ones never, the others within the
  // floor), published for the clients' gates; stuck ones no longer count for the policy.
  // Policy fill: requests hold training, within TANDEM_FILL_ONLINE_HOLD of each second (the
  // holds' floor is the rest), so that one arriving while training computes runs at once.
  const bool slo = params_.policy == TANDEM_POLICY_SLO;
  const bool fill_holds = !slo && training && !online_.empty() && params_.fill.online_hold > 0;
  const bool may_hold = holds_.allow(now_ns, online_, slo ? slo_.duty() : 1.0) && (slo || fill_holds);
  // Policy fill: a request that arrives while training computes and whose bubble is due within
  // the horizon waits for it, so that the holds go to those that would wait long (hold_horizon.h).
  bool bubble_due = false;
  if (fill_holds) {
    horizon_.tick(holds_.pace(), detector_.mean_busy_ns());
    bubble_due = detector_.phase() == GpuPhase::busy &&
                 horizon_.bubble_due(now_ns, detector_.phase_started_ns(), detector_.mean_busy_ns());
  }
  // Policy fill publishes every open request (stuck ones cleared): a batch filler yields to one
  // always (online before offline); training only while it may be held, by its gate below.
  bool holding = false;
  for (const OnlineClient& o : online_) {
    uint32_t open = may_hold ? o.requests_open : 0;
    holding = holding || open > 0;
    publish_requests(shm, shm->slots[o.id], segment_.view(o.id), slo ? open : o.requests_open);
  }

  // Policy slo: the best-effort job (training, else the fillers) is gated while online
  // inference is active, at the controller's duty cycle.
  if (slo) {
    std::vector<FillerState>& best_effort = training ? training_ : fillers_;
    if (training && live) live_levels(live_mask, live_pcts);
    slo_.step(now_ns, online_, best_effort, grants_, training && spatial, training && live ? live_pcts : nullptr);
    __atomic_store_n(&shm->control_seq, slo_.control_seq(), __ATOMIC_RELEASE);
    __atomic_store_n(&shm->training_duty_ppm, static_cast<uint32_t>(slo_.training_duty() * 1e6), __ATOMIC_RELAXED);
    set_gates(shm, best_effort, slo_.gating() ? TANDEM_GATE_TOKENS : TANDEM_GATE_OPEN);
    // The clients bound their own in-flight work; fillers beside training are bounded by the
    // fill policy's grants instead (a bound left from when they were the best-effort job would
    // hold them back for good).
    uint64_t share = slo_.gating() ? slo_.inflight_share_ns(best_effort.size()) : 0;
    set_inflight_bounds(shm, best_effort, share);
    if (training) set_inflight_bounds(shm, fillers_, 0);
    apply(shm, grants_, now_ns);
    // Said once each time it happens: holding training back can no longer hold the target.
    if (slo_.controller().saturated() && !slo_saturated_warned_)
      TANDEM_LOG_WARN("slo: online inference is over its latency target with training at the minimum duty cycle "
                      "({:.0f}%): the target cannot be held by holding training back (is inference alone over it?)",
                      slo_.duty() * 100);
    slo_saturated_warned_ = slo_.controller().saturated();
    policy_.limit_inflight(slo_.gating() ? slo_.inflight_bound_ns() : UINT64_MAX);
    __atomic_store_n(&shm->requests_unheld, slo_.requests_unheld() ? 1u : 0u, __ATOMIC_RELEASE);
    // Unheld (a busy server), requests let training run at its duty cycle: not a hold. What it
    // is given counts its partition (duty x p of the GPU), so a floor met on a partition is the
    // floor, not p's complement of it.
    holds_.decided(slo_.gating(), slo_.gating() && holding && !slo_.requests_unheld(), slo_.training_share());
  } else {
    // Policy fill: training's launches wait while a request holds it (the gate reopens at the
    // tick after the request's end). Its in-flight bound applies to the launches that pass the
    // gate while it is shut; those made with it open are not bounded (docs/scheduler.md: the
    // bound on every launch cost PyTorch training 11-18%). What training queued before the
    // request still runs: under MPS behind the request's blocks (training asks for below-normal
    // priority, TANDEM_MPS_PRIORITY), without MPS before them.
    set_gates(shm, training_, holding ? TANDEM_GATE_TOKENS : TANDEM_GATE_OPEN);
    set_inflight_bounds(shm, training_, fill_holds ? params_.fill.max_inflight_ns / training_.size() : 0);
    // Published for the requests' admission: 0 lets a request run at once, 1 sends it to a bubble.
    __atomic_store_n(&shm->requests_unheld, may_hold && !bubble_due ? 0u : 1u, __ATOMIC_RELEASE);
    // A hold costs training the time in which its queued work makes no progress (no completion
    // marker of training passed: behind a gated launch, or the progress thread's one a tick),
    // except inside a bubble, up to its predicted end: training had nothing to run (the phase
    // is kept as the hold found it, below). Progress, not the queue's size, is what counts: an
    // in-flight estimate that never fell to 0 would make every hold free; and a request held
    // open from a bubble for ever is charged from the bubble's predicted end.
    bool progressed = training_completed > training_completed_;
    bool in_bubble = detector_.phase() == GpuPhase::bubble && now_ns < detector_.predicted_bubble_end_ns();
    bool charged = holding && !progressed && !in_bubble;
    holds_.decided(charged, charged, 1.0);
  }
  training_completed_ = training_completed;
  publish_live_partition(shm, slo && training);
  request_running_ = slo && training && slo_.gating() && holding;

  // Without a training job there is nothing to protect: fillers run ungated (unless the slo
  // policy gates them above), but each one's queue on the GPU stays bounded, so that a training
  // job that arrives waits behind at most that much (a launcher that never synchronizes would
  // otherwise queue seconds of work). Beside training the fill policy's grants bound them.
  if (training) {
    set_gates(shm, fillers_, TANDEM_GATE_TOKENS);
    if (!slo) set_inflight_bounds(shm, fillers_, 0);
  } else if (!slo || !slo_.gating()) {
    if (!slo) set_gates(shm, fillers_, TANDEM_GATE_OPEN);
    set_inflight_bounds(shm, fillers_, kAloneInflightFactor * params_.fill.max_inflight_ns);
  }
  // While a request holds training under policy fill, the quiet it makes is no bubble of
  // training's (learned, it would shorten the predicted bubbles): the phase stays as it was.
  const bool fill_holding = !slo && holding;
  GpuPhase phase = !training ? GpuPhase::bubble : fill_holding ? detector_.phase() : detector_.update(sample);
  __atomic_store_n(&shm->predicted_bubble_end_ns, training ? detector_.predicted_bubble_end_ns() : 0, __ATOMIC_RELEASE);
  __atomic_store_n(&shm->gpu_phase, !training ? TANDEM_GPU_NO_TRAINING
                                   : phase == GpuPhase::bubble ? TANDEM_GPU_BUBBLE : TANDEM_GPU_BUSY, __ATOMIC_RELEASE);
  if (phase != last_phase_) {
    // A bubble the detector saw began when the GPU turned quiet; one because the training job
    // left, now (the detector's phase is then the job's last, a busy one that began earlier).
    trace_.add({phase == GpuPhase::bubble && training ? detector_.phase_started_ns() : now_ns,
                phase == GpuPhase::bubble ? 'B' : 'E', 0, 0});
    last_phase_ = phase;
    if (phase == GpuPhase::bubble) futex_bump_and_wake(&shm->bubble_seq);  // online requests waiting for one
  }
  usage_.update(now_ns, !training ? GpuState::no_training : phase == GpuPhase::bubble ? GpuState::bubble : GpuState::busy,
                slo && slo_.active() ? slo_.duty() : 1.0, others_work);
  // Fillers run in the bubble once the fill policy grants (its phase as of the last tick);
  // training held back by policy slo is no bubble: online inference has that time.
  const FillPhase filling = policy_.phase();
  capacity_.update(now_ns, !training ? GpuState::no_training : phase == GpuPhase::bubble ? GpuState::bubble : GpuState::busy,
                   (filling == FillPhase::incremental || filling == FillPhase::stable) && !(slo && slo_.gating()),
                   static_cast<uint32_t>(fillers_.size()));
  check_admission(shm, now_ns);
  if (params_.zico) step_zico(shm, now_ns);
  if (!training) return;

  communicating_ = collectives_pending > 0;
  receiving_ = !communicating_ && nccl_pending > 0;
  // The NCCL kernels' runs, point-to-point too, for policy slo's floor (a request waits for
  // whatever NCCL kernel of training runs before it, as it did before the two were told apart).
  bool was_running = nccl_running_;
  nccl_running_ = nccl_pending > 0;
  if (nccl_running_ && !was_running) communicating_since_ns_ = now_ns;
  if (!nccl_running_ && was_running) {
    collectives_ns_[collective_next_] = now_ns - communicating_since_ns_;
    collective_next_ = (collective_next_ + 1) % kCollectives;
  }
  policy_.step(phase, communicating_, now_ns, detector_.phase_started_ns(), detector_.predicted_bubble_end_ns(), fillers_, grants_);
  if (policy_.revoke()) {
    for (const FillerState& f : fillers_) {
      // A zero balance: the limit falls to what the client has spent (a launch taking tokens
      // meanwhile overdraws, as it may anyway).
      tandem_slot& s = shm->slots[f.id];
      const ClientView& c = segment_.view(f.id);
      int64_t left = balance(s, c);
      __atomic_store_n(&s.token_limit_ns, c.v.tokens_taken_ns, __ATOMIC_RELEASE);
      if (left > 0) trace_.add({now_ns, 'R', s.pid, left});
    }
  }
  apply(shm, grants_, now_ns);
}

void GpuScheduler::admitted(int slot) {
  tandem_shm_header* shm = segment_.shm();
  if (!params_.zico || !shm || slot < 0 || slot >= static_cast<int>(TANDEM_MAX_SLOTS)) return;
  tandem_slot& s = shm->slots[slot];
  if (s.role != TANDEM_ROLE_TRAINING) return;
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
    const tandem_slot& o = shm->slots[i];
    if (static_cast<int>(i) == slot || __atomic_load_n(&o.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE ||
        o.role != TANDEM_ROLE_TRAINING)
      continue;
    // What the policy publishes for a job it has not learned (zico_policy.h): its first
    // allocation waits. Until the next period it could allocate beside the other job's peak
    // (a newcomer ran out of memory after 30 MiB of its first iteration).
    __atomic_store_n(&s.zico_trough_bytes, UINT64_MAX, __ATOMIC_RELEASE);
    __atomic_store_n(&s.zico_shared, 1u, __ATOMIC_RELEASE);
    return;
  }
}

uint64_t GpuScheduler::zico_budget_bytes() const {
  if (params_.zico_budget_bytes) return params_.zico_budget_bytes;
  const tandem_shm_header* shm = segment_.shm();
  return shm ? static_cast<uint64_t>(static_cast<double>(shm->gpu_total_bytes) * params_.zico_budget_percent / 100) : 0;
}

// Zico: learns the training jobs' memory curves from their pages and lets a job waiting at an
// iteration boundary start when its iteration fits beside the others' (zico_policy.h).
void GpuScheduler::step_zico(tandem_shm_header* shm, uint64_t now_ns) {
  zico_samples_.clear();
  // No process holds more than the GPU has: a claim past it is bounded there.
  const uint64_t most = shm->gpu_total_bytes ? shm->gpu_total_bytes : UINT64_MAX;
  for (const FillerState& t : training_) {
    const tandem_slot& s = shm->slots[t.id];
    const ClientView& c = segment_.view(t.id);
    zico_samples_.push_back({t.id, s.generation, std::min(c.v.bytes_in_use, most), c.v.zico_starts, c.v.zico_waiting != 0});
  }
  // Without the GPU's size there is no budget: nobody is held.
  uint64_t budget = zico_budget_bytes();
  zico_.step(now_ns, zico_samples_, budget ? budget : UINT64_MAX, zico_decisions_);
  for (const ZicoDecision& d : zico_decisions_) {
    tandem_slot& s = shm->slots[d.slot];
    __atomic_store_n(&s.zico_trough_bytes, d.trough_bytes, __ATOMIC_RELEASE);
    __atomic_store_n(&s.zico_shared, d.shared ? 1u : 0u, __ATOMIC_RELEASE);
    if (!d.grant) continue;
    __atomic_store_n(&s.zico_permits, d.permits, __ATOMIC_RELEASE);
    wake(s);
    trace_.add({now_ns, 'Z', s.pid, 0});
  }
}

// A filler wants work when a launch waits at its gate or it launched within the last
// kFillerActiveNs. A registered filler with nothing to do (a server between requests) took an
// equal share of every bubble's in-flight bound: beside three idle ones the one filler working
// used 0.39 of the bubbles instead of 0.78-0.82.
bool GpuScheduler::filler_wants_work(const tandem_slot& s, int slot, const ClientView& c, uint64_t now_ns) {
  auto i = static_cast<size_t>(slot);
  if (filler_generation_[i] != s.generation) {  // a new client: active from its registration
    filler_generation_[i] = s.generation;
    filler_launches_[i] = c.v.launches;
    filler_active_ns_[i] = now_ns;
  }
  if (c.v.launches != filler_launches_[i] || c.v.gate_want_us) {
    filler_launches_[i] = c.v.launches;
    filler_active_ns_[i] = now_ns;
  }
  return now_ns < filler_active_ns_[i] + kFillerActiveNs;
}

uint64_t GpuScheduler::others_work_since(const tandem_slot& s, int slot, const ClientView& c) {
  // The view is bounded: within one client's life completed_ns never goes backwards.
  uint64_t done = c.v.completed_ns;
  uint64_t& last = others_completed_[static_cast<size_t>(slot)];
  uint32_t& generation = others_generation_[static_cast<size_t>(slot)];
  if (generation != s.generation) {
    generation = s.generation;
    last = 0;
  }
  uint64_t delta = done >= last ? done - last : 0;
  last = done;
  return delta;
}

// Admission checks (SpecInF principles I and II). Principle II: an online filler whose single request takes longer than the longest
// bubble can never be served inside one. Said once per client, with the figures.
void GpuScheduler::check_admission(tandem_shm_header* shm, uint64_t now_ns) {
  refusals_.clear();
  // Principle I: the colocated processes' peak memory must fit the GPU together.
  // The sum every tick; the message (strings, allocations) only when it does not fit.
  uint64_t peaks = 0;
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
    const tandem_slot& s = shm->slots[i];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) == TANDEM_SLOT_ACTIVE) peaks += segment_.view(static_cast<int>(i)).v.peak_bytes;
  }
  if (shm->gpu_total_bytes && peaks > shm->gpu_total_bytes) {
    std::string who;
    for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
      const tandem_slot& s = shm->slots[i];
      if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE) continue;
      who += (who.empty() ? "" : ", ") + std::to_string(s.pid) + ": " +
             std::to_string(segment_.view(static_cast<int>(i)).v.peak_bytes >> 20) + " MiB";
    }
    std::string why = "summed peak memory " + std::to_string(peaks >> 20) + " MiB (" + who + ") exceeds the GPU's " +
                      std::to_string(shm->gpu_total_bytes >> 20) + " MiB: this colocation will run out of memory";
    refusals_.push_back(why);
    // Once each time it starts, and at most every 10 s: a client's peak going up and down
    // every period (a hostile page may) must not flood the log.
    if (!memory_warned_ && (!memory_warning_ns_ || now_ns >= memory_warning_ns_ + 10000000000ull)) {
      TANDEM_LOG_WARN("admission refused: {}", why);
      memory_warning_ns_ = now_ns;
    }
    memory_warned_ = true;
  } else {
    memory_warned_ = false;
  }
  if (detector_.bubbles() < 3) return;  // not enough of the iteration profile learned yet
  for (uint32_t i = 0; i < TANDEM_MAX_SLOTS; ++i) {
    tandem_slot& s = shm->slots[i];
    if (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) != TANDEM_SLOT_ACTIVE || s.role != TANDEM_ROLE_INFERENCE) continue;
    uint64_t request = segment_.view(static_cast<int>(i)).v.request_ns;
    if (request == 0 || request <= detector_.longest_bubble_ns()) continue;
    std::string why = "pid " + std::to_string(s.pid) + ": one request takes " + std::to_string(request / 1000) +
                      " us, longer than the longest bubble (" + std::to_string(detector_.longest_bubble_ns() / 1000) +
                      " us): it cannot fill bubbles and runs only when its SLO wait expires";
    refusals_.push_back(why);
    uint64_t key = (static_cast<uint64_t>(i) << 32) | s.generation;
    if (warned_.insert(key).second) TANDEM_LOG_WARN("admission refused for {}", why);
  }
  // A batch filler waiting with one launch longer than any bubble: it waits until training
  // leaves the GPU idle that long (or leaves), never granted. Said in status while it waits.
  for (const FillerState& f : fillers_) {
    if (f.want_ns <= detector_.longest_bubble_ns()) continue;
    const tandem_slot& s = shm->slots[f.id];
    refusals_.push_back("pid " + std::to_string(s.pid) + ": waits at its gate with one launch of " +
                        std::to_string(f.want_ns / 1000) + " us, longer than the longest bubble (" +
                        std::to_string(detector_.longest_bubble_ns() / 1000) +
                        " us): it runs when training leaves the GPU idle that long");
  }
}

uint64_t GpuScheduler::longest_collective_ns() const {
  return *std::max_element(collectives_ns_, collectives_ns_ + kCollectives);
}

// A request arriving at the worst moment waits for what training has on the GPU: the work in
// flight at the lowest duty cycle, and a collective that is never held back (a rank's peers
// would stall) for its whole length. Then it runs for its own GPU time.
GpuScheduler::SloFloor GpuScheduler::slo_floor() const {
  SloFloor f;
  f.request_ns = slowest_request_ns_;
  f.collectives_held = collectives_held_;
  f.tightest_target_ns = tightest_target_ns_;
  if (training_.empty()) return f;
  f.inflight_ns = static_cast<uint64_t>(params_.slo.controller.min_duty * static_cast<double>(params_.slo.window_ns));
  // Under an MPS SM split a collective (a few SMs) runs beside inference, not before it.
  if (!collectives_held_ && !slo_.spatial() && !slo_.live()) f.collective_ns = longest_collective_ns();
  return f;
}

}  // namespace tandem::scheduler
