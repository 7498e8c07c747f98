// Fault kind `crash`: the rank process dies abruptly (SIGKILL, or exit with `exit_code`).
// Keys only for now; the injector lands in this file.
#include "harness/registry.h"
#include "harness/scenario.h"
#include "harness/scenario_schema.h"

namespace nanchaos::inject {
namespace {

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo crash_kind() {
  FaultKindInfo info;
  info.name = "crash";
  info.doc = "the rank process dies abruptly";
  info.keys = {
      Key("exit_code", KeyType::kInt, "exit with this status instead of being killed by SIGKILL")
          .range(0, 255),
  };
  info.not_implemented = "crash faults (issue 3)";
  info.make = nullptr;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(crash, crash_kind());

}  // namespace nanchaos::inject
