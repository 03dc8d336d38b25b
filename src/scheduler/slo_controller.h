// The inner loop of GPUColo (§V), the controller of policy `slo`: once per control period it
// compares online inference's measured latency with its target and sets training's duty
// cycle, the fraction of GPU time training may use while inference is active. Pure logic.
//
// Model (normalized, y = latency / target, d = duty cycle in [min_duty, 1]):
//     y(k+1) = y(k) + m * (d(k+1) - d(k))
// m > 0 is how much the latency rises when training gets more of the GPU. Proportional control
// of the change in duty cycle, the duty cycle itself being the integrator:
//     d(k+1) = clamp(d(k) + g * (1 - y(k)) / m_hat,  min_duty, 1),   increase at most max_rise
// Closed loop: e(k+1) = (1 - g * m / m_hat) * e(k), stable while 0 < g * m / m_hat < 2, i.e.
// for any true gain up to 2 / g = 4 times the estimate (g = 0.5), with zero steady-state error
// (the duty cycle integrates). m_hat is identified online from the system's response: after a
// period whose duty cycle moved by at least min_step, the observed (dy / dd) is averaged into
// it; observations outside [min_gain, max_gain] (noise, a load change) are dropped and m_hat
// stays in those bounds. Anti-windup: the duty cycle is clamped, nothing else accumulates, so
// leaving a limit takes one period. Rising is limited to max_rise per period: giving training
// the GPU back is cautious, taking it away is not.
#pragma once
#include <cstdint>

namespace tandem::scheduler {

struct SloControllerParams {
  double gain = 0.5;       // g: fraction of the predicted correction applied per period
  double initial_m = 1.0;  // m_hat before any identification: full duty cycle adds one target
  double min_gain = 0.2, max_gain = 3.0;  // full duty adds 0.2 to 3 targets: beyond, a load change, not training
  double min_duty = 0.05;  // training is never starved completely
  double max_rise = 0.2;   // at most this much duty cycle more per period
  double min_step = 0.05;  // a duty change this large identifies the gain
};

class SloController {
 public:
  explicit SloController(SloControllerParams p = {}) : p_(p) {}

  // One control period: `normalized_latency` is the measured latency over the target (the
  // worst of the inference processes). Returns the duty cycle for the next period.
  double update(double normalized_latency);
  // A period without a measurement (no request ended): the duty cycle stays, and the next
  // measurement does not identify the gain from a stale pair.
  void skip() { have_previous_ = false; }
  // A cut between periods (the latency model predicts a violation): the duty cycle falls to
  // `duty` at once (not below min_duty), and the next measurement does not identify the gain
  // from a step it did not make.
  void cap(double duty);

  double duty() const { return duty_; }
  double gain_estimate() const { return m_hat_; }
  // True when the latency is over the target with training already at min_duty: the target
  // cannot be held by holding training back.
  bool saturated() const { return saturated_; }

 private:
  SloControllerParams p_;
  double duty_ = 1.0;
  double m_hat_ = p_.initial_m;
  double previous_y_ = 0, previous_step_ = 0;
  bool have_previous_ = false;
  bool saturated_ = false;
};

}  // namespace tandem::scheduler
