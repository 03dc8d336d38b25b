// Where one GPU's time went, for the metrics endpoint (docs/metrics.md): seconds with training
// computing, in a bubble, or with no training at all; the GPU work the other clients (fillers
// and online inference) completed in each; and two estimates over the last
// kWindowSeconds (exponentially weighted, so a scrape at any moment sees the recent past):
//  * bubble use: the others' GPU work completed in bubbles / bubble time (what the demo
//    reports as bubble use, measured by the daemon instead of the programs);
//  * training retained: the share of its own speed training keeps. Training loses time in
//    two ways tandemd can see: the policy holds it back (policy slo: it may run only its duty
//    cycle while online inference is active), and other clients' work runs on the GPU while
//    training computes (each such second displaces about one second of training). So
//    retained = (training's allowed time - others' work while it computes) / its wall time.
//    An estimate: it assumes the GPU is time-shared while both run, as it is without MPS.
// Pure logic, time passed in.
#pragma once
#include <cstdint>

namespace tandem::scheduler {

enum class GpuState { busy = 0, bubble = 1, no_training = 2 };

class GpuUsage {
 public:
  static constexpr double kWindowSeconds = 10.0;
  // One tick: the state the GPU was in since the previous one, the share of that time the
  // policy let training run (1: ungated), and the GPU work the other clients completed since.
  void update(uint64_t now_ns, GpuState state, double training_allowed, uint64_t others_work_ns);

  double seconds(GpuState s) const { return seconds_[static_cast<int>(s)]; }
  double others_work_seconds(GpuState s) const { return work_s_[static_cast<int>(s)]; }
  // NaN while the window holds no bubble (no training time) to judge by.
  double bubble_use() const;
  double training_retained() const;

 private:
  bool started_ = false;
  uint64_t last_ns_ = 0;
  GpuState last_state_ = GpuState::no_training;
  double seconds_[3] = {0, 0, 0};
  double work_s_[3] = {0, 0, 0};
  // Weighted sums over the window: bubble time, others' work in bubbles, training's wall time,
  // its allowed time, others' work while it computes.
  double w_bubble_ = 0, w_bubble_work_ = 0, w_training_ = 0, w_allowed_ = 0, w_stolen_ = 0;
};

}  // namespace tandem::scheduler
