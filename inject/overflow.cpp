// Fault kind `overflow`: an fp16 overflow point; multiplies a module's output by `factor` so it
// leaves the half range. Keys only for now; the injector lands in this file.
#include "harness/registry.h"
#include "harness/scenario.h"
#include "harness/scenario_schema.h"

namespace nanchaos::inject {
namespace {

using harness::FaultKindInfo;
using harness::FaultSpec;
using harness::Key;
using harness::KeyType;

FaultKindInfo overflow_kind() {
  FaultKindInfo info;
  info.name = "overflow";
  info.doc = "multiplies a module's output so it leaves the half range (fp16 overflow point)";
  info.keys = {
      Key("target", KeyType::kString, "activation:MODULE whose output is scaled").required(),
      Key("factor", KeyType::kFloat, "multiplier applied to the module's output").def(1e5).above(0),
  };
  info.not_implemented = "fp16 overflow points (issue 5)";
  info.make = nullptr;
  info.check = [](const FaultSpec& f) { harness::check_target(f, "target", {"activation"}); };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(overflow, overflow_kind());

}  // namespace nanchaos::inject
