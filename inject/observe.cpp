// The C++ agent's observed:* detections (observe.h).
#include "inject/observe.h"

#include <algorithm>

#include "harness/evidence/event_types.h"

namespace nanchaos::inject {

void Observer::end_iteration(int64_t step, bool updated) {
  if (updated) return;
  harness::DetectEvent det;
  det.detector = "observed:skip";
  det.step = step;
  det.source = "observed";
  harness::write_event(log_, det);
}

void Observer::exception(int64_t step, const std::string& message) {
  harness::DetectEvent det;
  det.detector = "observed:exception";
  det.step = std::max<int64_t>(step, 0);
  det.source = "observed";
  det.message = message;
  harness::write_event(log_, det);
}

}  // namespace nanchaos::inject
