#include "slo_controller.h"

#include <algorithm>
#include <cmath>

namespace tandem::scheduler {

double SloController::update(double y) {
  if (have_previous_ && std::fabs(previous_step_) >= p_.min_step) {
    double observed = (y - previous_y_) / previous_step_;
    if (observed >= p_.min_gain && observed <= p_.max_gain) m_hat_ = 0.7 * m_hat_ + 0.3 * observed;
  }
  double step = p_.gain * (1.0 - y) / m_hat_;
  step = std::min(step, p_.max_rise);
  double next = std::clamp(duty_ + step, p_.min_duty, 1.0);
  saturated_ = y > 1.0 && next <= p_.min_duty;
  previous_step_ = next - duty_;  // what was applied, after the limits
  previous_y_ = y;
  have_previous_ = true;
  duty_ = next;
  return duty_;
}

void SloController::cap(double duty) {
  duty = std::max(duty, p_.min_duty);
  if (duty >= duty_) return;
  duty_ = duty;
  have_previous_ = false;
}

}  // namespace tandem::scheduler
