// Registries of fault kinds and detectors, filled at static-initialization time by one
// registration line next to each class (as FoundationDB's REGISTER_WORKLOAD does).
//
//   // inject/lr.cpp
//   NANCHAOS_REGISTER_FAULT_KIND(lr, (FaultKindInfo{"lr", "multiplies the learning rate",
//       {{"factor", KeyType::kFloat, ...}}, "", &make_lr_injector}));
//
// A kind or detector whose feature is not built yet registers with `not_implemented` set: its
// keys validate, and `nanchaos run` refuses the scenario with "not implemented yet: <that text>".
// Duplicate names abort at start-up. The executable links the registrars' object files whole
// (CMake WHOLE_ARCHIVE), so no registration is dropped by the linker.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/keys.h"

namespace nanchaos::inject {
class Injector;
}
namespace nanchaos::detect {
class Detector;
}

namespace nanchaos::harness {

struct FaultSpec;
struct Scenario;

/// A fault kind: its extra keys (besides the common ones) and how to build its injector.
struct FaultKindInfo {
  std::string name;
  std::string doc;
  std::vector<KeySpec> keys;
  std::string not_implemented;  ///< "" when built; otherwise what is missing (and which issue)
  std::function<std::unique_ptr<inject::Injector>(const FaultSpec&, const Scenario&)> make;
  /// Optional cross-key check after the keys validated (e.g. count vs fraction); throws
  /// ScenarioError with a position. May be empty.
  std::function<void(const FaultSpec&)> check;
  /// Optional check against the rest of the scenario (workload, loss...), after [job] and
  /// [workload] loaded; throws ScenarioError with a position. May be empty.
  std::function<void(const FaultSpec&, const Scenario&)> check_job;
};

/// A detector: the [detectors] keys it reads and how to build it.
struct DetectorInfo {
  std::string name;
  std::string doc;
  std::vector<KeySpec> keys;
  std::string not_implemented;
  std::function<std::unique_ptr<detect::Detector>(const Scenario&)> make;
};

std::map<std::string, FaultKindInfo>& fault_kinds();
std::map<std::string, DetectorInfo>& detectors();

/// Registers; aborts the process with a message on a duplicate name.
bool register_fault_kind(FaultKindInfo info);
bool register_detector(DetectorInfo info);

}  // namespace nanchaos::harness

#define NANCHAOS_REGISTER_FAULT_KIND(id, ...)             \
  static const bool nanchaos_fault_kind_registered_##id = \
      ::nanchaos::harness::register_fault_kind(__VA_ARGS__)
#define NANCHAOS_REGISTER_DETECTOR(id, ...)             \
  static const bool nanchaos_detector_registered_##id = \
      ::nanchaos::harness::register_detector(__VA_ARGS__)
