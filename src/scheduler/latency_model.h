// HARLI's latency predictor, per online inference process: a linear model of its normalized
// request latency (the measured percentile over its target) from what runs beside it,
//     y = θ0 + θ1 · duty + θ2 · load
// where `duty` is training's duty cycle (its share of the GPU while inference is active) and
// `load` the inference's own GPU utilization (requests per second times one request's GPU
// time: the request rate and size together). Learned online by recursive least squares with
// exponential forgetting, one observation per control period. The slo policy asks it, between
// control periods, for the duty cycle that keeps y at 1 under the load seen so far, and cuts
// training back at a burst's onset instead of a period later. Pure arithmetic; no allocation.
#pragma once
#include <cstdint>

namespace tandem::scheduler {

class LatencyModel {
 public:
  static constexpr int kMinObservations = 6;  // before that, no prediction
  explicit LatencyModel(double forgetting = 0.97) : lambda_(forgetting) { reset(); }

  void reset();
  // One control period: the duty cycle training had, the load inference put on the GPU, and
  // the latency it measured over its target.
  void observe(double duty, double load, double y);
  double predict(double duty, double load) const;
  // Enough observations, with the duty cycle and the load both having varied.
  bool ready() const;
  // The duty cycle predicted to give latency `y` under `load`; false when the model sees no
  // effect of training on latency (θ1 <= 0.05: cutting training would not help).
  bool duty_for(double y, double load, double* duty) const;
  const double* theta() const { return theta_; }
  int observations() const { return n_; }

 private:
  double lambda_;
  double theta_[3];
  double p_[3][3];  // the inverse covariance of the regressors, scaled
  int n_ = 0;
  double duty_lo_ = 0, duty_hi_ = 0, load_lo_ = 0, load_hi_ = 0;  // what it has seen
};

}  // namespace tandem::scheduler
