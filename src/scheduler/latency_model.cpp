#include "latency_model.h"

#include <algorithm>

namespace tandem::scheduler {

void LatencyModel::reset() {
  // Prior: latency at the target whatever runs (θ = [1, 0, 0]), weak (large P).
  theta_[0] = 1, theta_[1] = 0, theta_[2] = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) p_[i][j] = i == j ? 100.0 : 0.0;
  n_ = 0;
}

void LatencyModel::observe(double duty, double load, double y) {
  const double x[3] = {1.0, duty, load};
  // Standard RLS: k = P x / (λ + xᵀ P x); θ += k (y − xᵀθ); P = (P − k xᵀ P) / λ.
  double px[3];
  for (int i = 0; i < 3; ++i) px[i] = p_[i][0] * x[0] + p_[i][1] * x[1] + p_[i][2] * x[2];
  double denom = lambda_ + x[0] * px[0] + x[1] * px[1] + x[2] * px[2];
  double k[3] = {px[0] / denom, px[1] / denom, px[2] / denom};
  double err = y - predict(duty, load);
  for (int i = 0; i < 3; ++i) theta_[i] += k[i] * err;
  double xp[3];  // xᵀ P (P is symmetric: the same as P x)
  for (int j = 0; j < 3; ++j) xp[j] = px[j];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) p_[i][j] = (p_[i][j] - k[i] * xp[j]) / lambda_;
  // Bounded: a long stretch of identical observations must not blow P up (covariance windup).
  for (int i = 0; i < 3; ++i) p_[i][i] = std::min(p_[i][i], 1e4);
  if (n_ == 0) duty_lo_ = duty_hi_ = duty, load_lo_ = load_hi_ = load;
  duty_lo_ = std::min(duty_lo_, duty), duty_hi_ = std::max(duty_hi_, duty);
  load_lo_ = std::min(load_lo_, load), load_hi_ = std::max(load_hi_, load);
  ++n_;
}

double LatencyModel::predict(double duty, double load) const { return theta_[0] + theta_[1] * duty + theta_[2] * load; }

bool LatencyModel::ready() const {
  return n_ >= kMinObservations && duty_hi_ - duty_lo_ >= 0.1 && load_hi_ - load_lo_ >= 0.02;
}

bool LatencyModel::duty_for(double y, double load, double* duty) const {
  if (!ready() || theta_[1] <= 0.05) return false;
  *duty = (y - theta_[0] - theta_[2] * load) / theta_[1];
  return true;
}

}  // namespace tandem::scheduler
