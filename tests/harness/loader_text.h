// Scenario text for the loader's tests: the error a text raises and a valid head to build on.
#pragma once

#include <string>

#include "harness/scenario/scenario.h"

namespace nanchaos::test_util {

/// The text of the harness::ScenarioError that loading `text` (as "x.toml") raises, or
/// "no error".
inline std::string loader_error(const std::string& text) {
  try {
    harness::load_scenario_string(text, "x.toml");
  } catch (const harness::ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

/// A valid [scenario] + [job] head on lines 1-5 (a `steps`-step mlp); `rest` follows on line 6.
inline std::string with_head(const std::string& rest, int steps = 30) {
  return "[scenario]\nname = \"t\"\n[job]\nworkload = \"mlp\"\nsteps = " + std::to_string(steps) +
         "\n" + rest;
}

}  // namespace nanchaos::test_util
