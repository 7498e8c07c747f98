// libFuzzer target nanchaos_fuzz_scenario: scenario TOML text -> the loader and its validation
// (load_scenario_string, what `nanchaos validate` runs), then what a loaded scenario feeds: the
// unimplemented-feature check and the plan an external job's agent reads (compile_plan,
// plan_draws).
//
// The contract under test (harness/scenario/scenario.h): any text either loads or throws
// ScenarioError. Any other exception, a crash, a leak, an ASan/UBSan report or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/scenario/plan.h"
#include "harness/scenario/scenario.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  nanchaos::fuzz::register_snapshot();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nanchaos::harness;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Scenario s;
  try {
    s = load_scenario_string(text, "fuzz.toml");
  } catch (const ScenarioError&) {
    return 0;  // refused with a message: the expected outcome for most inputs
  }
  (void)unimplemented_features(s);
  (void)compile_plan(s).dump();
  // The draws walk steps x ranks: bounded so that a valid `steps = 1e9` is not a "hang".
  if (s.job.steps <= 4096 && s.job.ranks <= 4096 && s.job.steps * s.job.ranks <= 4096) {
    (void)plan_draws(s, 64).dump();
  }
  return 0;
}
