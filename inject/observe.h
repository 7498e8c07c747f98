// What an external job's own stack did, read off the job: the C++ agent's `observed:*`
// detections (the Python agent's counterpart is inject/python/nanchaos/observe.py).
//
//   observed:skip       an iteration that ended with no parameter update (agent.cpp decides
//                       "updated" from each parameter's first and last element)
//   observed:exception  the program passed an exception to Agent::exception() (`message`: its
//                       what(), at most 2000 characters)
//
// The Observer is built from the event log alone: it holds no plan, no fault and no expectation
// (the plan reaches only the injection modules, faults.h, through agent.cpp).
// It includes no header that can reach a plan type (tests/include_rules.py checks this
// transitively). Torch-free. Thread-safety: the training thread only, as the Agent.
#pragma once

#include <cstdint>
#include <string>

#include "harness/evidence/events.h"

namespace nanchaos::inject {

class Observer {
 public:
  explicit Observer(harness::EventLog& log) : log_(log) {}

  /// Iteration `step` (0-based) ended; `updated`: some parameter was written during it.
  void end_iteration(int64_t step, bool updated);
  /// The program raised `message` during iteration `step` (< 0 before the first: step 0).
  void exception(int64_t step, const std::string& message);

 private:
  harness::EventLog& log_;
};

}  // namespace nanchaos::inject
