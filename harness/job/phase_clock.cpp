#include "harness/job/phase_clock.h"

#include <algorithm>

namespace nanchaos::harness {

PhaseClock::Reading PhaseClock::read() const {
  return {src_.now_ns(), src_.run_delay_ns(), src_.wait_wall_ns(), src_.wait_run_delay_ns()};
}

void PhaseClock::begin() {
  start_ = last_ = read();
  own_ns_ = {};
}

void PhaseClock::mark(std::optional<StepPhase> phase) {
  const Reading now = read();
  if (phase) {
    const int64_t wall = now.now - last_.now;
    const int64_t waited = now.wait_wall - last_.wait_wall;
    // Run delay outside the collectives: inside one it is part of `waited` already.
    const int64_t descheduled =
        (now.run_delay - last_.run_delay) - (now.wait_run_delay - last_.wait_run_delay);
    own_ns_[size_t(*phase)] += double(std::max<int64_t>(0, wall - waited - descheduled));
  }
  last_ = now;
}

StepTimes PhaseClock::times() const {
  StepTimes t;
  for (size_t k = 0; k < kStepPhases; ++k) t.own_us[k] = std::max(0.0, own_ns_[k] / 1000.0);
  t.wait_us = (last_.wait_wall - start_.wait_wall) / 1000;
  t.run_delay_us = (last_.run_delay - start_.run_delay) / 1000;
  return t;
}

}  // namespace nanchaos::harness
