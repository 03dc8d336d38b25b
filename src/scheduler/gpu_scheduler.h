// The per-GPU loop of tandemd (DESIGN §5): every sample period it sums the training clients'
// progress, asks the bubble detector where the GPU stands, and lets the fill policy grant
// tokens to the fillers (or take them back), waking any that wait. Under policy `slo` the slo
// policy also gates training (and, without training, the fillers) while online inference is
// active, at the duty cycle its controller sets.
#pragma once
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "bubble_detector.h"
#include "fill_policy.h"
#include "gpu_capacity.h"
#include "gpu_sharing.h"
#include "gpu_segment.h"
#include "gpu_usage.h"
#include "hold_horizon.h"
#include "request_holds.h"
#include "slo_policy.h"
#include "trace.h"
#include "zico_policy.h"

namespace tandem::scheduler {

struct SchedulerParams {
  uint64_t period_ns = 1000000;
  int quiet_samples = 1;
  FillParams fill;
  uint32_t policy = TANDEM_POLICY_FILL;
  SloParams slo;
  // Zico (TANDEM_ZICO): time-shift training iterations so their memory fits the budget,
  // given in bytes or as a percentage of the GPU's memory (TANDEM_ZICO_BUDGET).
  bool zico = false;
  uint64_t zico_budget_bytes = 0;
  double zico_budget_percent = 95;
  uint64_t zico_profile_ns = ZicoPolicy::kDefaultProfileNs;  // TANDEM_ZICO_PROFILE_MS
  // The Kubernetes slots (tandemd --config "slots"): the capacity windows and the pressure.
  SlotConfig slots;
};

class GpuScheduler {
 public:
  GpuScheduler(const std::string& uuid, const SchedulerParams& params);

  GpuSegment& segment() { return segment_; }
  // One period. `now_ns` is CLOCK_MONOTONIC.
  void tick(uint64_t now_ns);
  // A client was given `slot` (its hello): under Zico a training job that joins another is
  // held from its first allocation on, not only from the next period.
  void admitted(int slot);

  GpuPhase gpu_phase() const { return detector_.phase(); }
  FillPhase fill_phase() const { return policy_.phase(); }
  // Training's collectives (NCCL kernels other than point-to-point) still running at the last
  // tick: the fill policy's communication phase (TANDEM_FILL_COMM).
  bool communicating() const { return communicating_; }
  // Training's point-to-point NCCL kernels (a pipeline stage's receive) still running at the
  // last tick, and no collective: an ordinary bubble for the fill policy.
  bool receiving() const { return receiving_; }
  const BubbleDetector& detector() const { return detector_; }
  uint32_t policy() const { return params_.policy; }
  // Policy fill: the part of each second online requests may hold training (TANDEM_FILL_ONLINE_HOLD).
  double fill_online_hold() const { return params_.fill.online_hold; }
  const SloPolicy& slo() const { return slo_; }
  // Policy slo gates training and an online request holds it (as the clients' gates see it:
  // not a stuck client's, and within the floor, request_holds.h). A job's collectives are held then.
  bool request_running() const { return request_running_; }
  const RequestHolds& request_holds() const { return holds_; }
  // Policy fill: how near a bubble must be for a request to wait for it rather than hold training.
  const HoldHorizon& hold_horizon() const { return horizon_; }
  // Null unless TANDEM_ZICO is on.
  const ZicoPolicy* zico() const { return params_.zico ? &zico_ : nullptr; }
  uint64_t zico_budget_bytes() const;
  uint64_t ticks() const { return ticks_; }
  uint64_t tick_ns_total() const { return tick_ns_total_; }
  Trace& trace() { return trace_; }
  // What the slo policy can reach: the latency below which no target can be held, and why.
  struct SloFloor {
    uint64_t request_ns = 0;     // the slowest online client's request on its own (GPU time)
    uint64_t inflight_ns = 0;    // training work a request may find queued (the in-flight bound at min duty)
    uint64_t collective_ns = 0;  // training's longest recent collective, when it cannot be held back
    bool collectives_held = false;
    uint64_t tightest_target_ns = 0;  // the lowest online target (0: none)
    uint64_t total() const { return request_ns + inflight_ns + collective_ns; }
  };
  SloFloor slo_floor() const;
  // Training's longest collective among the last kCollectives (the NCCL kernels' run as the
  // daemon sees them pending, at its period's resolution).
  uint64_t longest_collective_ns() const;
  // Colocations refused by the admission checks, each with the reason (status shows them).
  const std::vector<std::string>& refusals() const { return refusals_; }
  // Where the GPU's time went, for the metrics (gpu_usage.h).
  const GpuUsage& usage() const { return usage_; }
  // The room it has for fillers, and its pressure (gpu_capacity.h).
  const GpuCapacity& capacity() const { return capacity_; }

 private:
  SchedulerParams params_;
  GpuSegment segment_;
  BubbleDetector detector_;
  FillPolicy policy_;
  SloPolicy slo_;
  RequestHolds holds_;
  HoldHorizon horizon_;
  bool communicating_ = false;
  bool receiving_ = false;
  bool nccl_running_ = false;  // any NCCL kernel of training, point-to-point too (collectives_ns_)
  Trace trace_;
  std::vector<FillerState> fillers_, training_;
  std::vector<OnlineClient> online_;
  std::vector<Grant> grants_;
  void check_admission(tandem_shm_header* shm, uint64_t now_ns);
  // Policy slo under MPS: the SMs each training process keeps while an online request runs
  // (the slot's live_partition), 0 between requests and when not live.
  void publish_live_partition(tandem_shm_header* shm, bool slo_training);
  void set_gates(tandem_shm_header* shm, const std::vector<FillerState>& clients, uint32_t gate);
  void set_inflight_bounds(tandem_shm_header* shm, const std::vector<FillerState>& clients, uint64_t ns);
  // A filler's queue with no training job on the GPU: this many times the in-flight bound.
  static constexpr uint64_t kAloneInflightFactor = 4;
  void apply(tandem_shm_header* shm, const std::vector<Grant>& grants, uint64_t now_ns);
  void step_zico(tandem_shm_header* shm, uint64_t now_ns);
  ZicoPolicy zico_;
  std::vector<ZicoSample> zico_samples_;
  std::vector<ZicoDecision> zico_decisions_;

  GpuPhase last_phase_ = GpuPhase::busy;
  std::vector<std::string> refusals_;
  std::set<uint64_t> warned_;  // (slot, generation) already warned about
  bool memory_warned_ = false;
  uint64_t memory_warning_ns_ = 0;  // when the summed-peak warning was last logged
  bool slo_saturated_warned_ = false;
  static constexpr int kCollectives = 16;
  uint64_t collectives_ns_[kCollectives] = {};
  int collective_next_ = 0;
  uint64_t communicating_since_ns_ = 0;
  bool request_running_ = false;
  uint64_t training_completed_ = 0;  // the training clients' completion markers passed, summed, last tick
  bool collectives_held_ = false;   // every training client's collectives may be held (TANDEM_JOB_LOCAL)
  uint64_t slowest_request_ns_ = 0; // among the online clients, last tick
  uint64_t tightest_target_ns_ = 0;
  uint64_t ticks_ = 0, tick_ns_total_ = 0;
  GpuUsage usage_;
  GpuCapacity capacity_;
  GpuSharing sharing_;  // who ran beside whom, for the clients' kernel timings
  // The other clients' completed GPU work as last read, per slot (and the slot's generation:
  // a new client's count starts from zero).
  std::array<uint64_t, TANDEM_MAX_SLOTS> others_completed_{};
  std::array<uint32_t, TANDEM_MAX_SLOTS> others_generation_{};
  // Fillers' activity: launches as last read, when one last launched or waited at its gate.
  static constexpr uint64_t kFillerActiveNs = 50000000;
  std::array<uint64_t, TANDEM_MAX_SLOTS> filler_launches_{};
  std::array<uint64_t, TANDEM_MAX_SLOTS> filler_active_ns_{};
  std::array<uint32_t, TANDEM_MAX_SLOTS> filler_generation_{};
  bool filler_wants_work(const tandem_slot& s, int slot, const ClientView& c, uint64_t now_ns);
  uint64_t others_work_since(const tandem_slot& s, int slot, const ClientView& c);
};

}  // namespace tandem::scheduler
