// Fault kind `hang`: the rank stops making progress, as a stuck GPU or a rank waiting on the
// wrong collective. Keys only for now; the injector lands in this file.
#include "harness/registry.h"
#include "harness/scenario.h"
#include "harness/scenario_schema.h"

namespace nanchaos::inject {
namespace {

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo hang_kind() {
  FaultKindInfo info;
  info.name = "hang";
  info.doc = "the rank stops making progress for a while or forever";
  info.keys = {
      Key("duration_ms", KeyType::kIntOrForever, "how long the rank stalls").required().min(1),
      Key("where", KeyType::kString, "where in the step the rank stalls")
          .def("before_grad_allreduce")
          .choices({"step_start", "before_grad_allreduce"}),
  };
  info.not_implemented = "hang faults (issue 3)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(hang, hang_kind());

}  // namespace nanchaos::inject
