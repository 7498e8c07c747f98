// Registries of fault kinds and detectors, filled at static-initialization time by one
// registration line next to each class (as FoundationDB's REGISTER_WORKLOAD does). The
// detectors' half is detector_registry.h (included here), which reaches no fault or scenario
// type: the detectors include only that one.
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

#include "harness/scenario/detector_registry.h"
#include "harness/scenario/keys.h"

namespace nanchaos::inject {
class Injector;
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

std::map<std::string, FaultKindInfo>& fault_kinds();

/// Registers; aborts the process with a message on a duplicate name.
bool register_fault_kind(FaultKindInfo info);

}  // namespace nanchaos::harness

#define NANCHAOS_REGISTER_FAULT_KIND(id, ...)             \
  static const bool nanchaos_fault_kind_registered_##id = \
      ::nanchaos::harness::register_fault_kind(__VA_ARGS__)
