// Builds a registered detector the way the stack does (DetectorInfo::make from a StackConfig),
// from a small scenario, for the per-detector check() tests (tests/detectors/<name>_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detectors/detector.h"
#include "harness/scenario/detector_registry.h"
#include "harness/scenario/scenario.h"

namespace nanchaos::detect::fixture {

/// The StackConfig of an mlp scenario whose [detectors] table holds `detectors_toml` (keys as
/// TOML lines) and whose [job] holds `job_toml`.
inline harness::StackConfig StackOf(const std::string& detectors_toml = "",
                                    const std::string& job_toml = "") {
  const harness::Scenario s = harness::load_scenario_string(
      "[scenario]\nname = \"d\"\n[job]\nworkload = \"mlp\"\nsteps = 20\n" + job_toml +
          "\n[detectors]\n" + detectors_toml + "\n",
      "d.toml");
  return harness::stack_config(s);
}

/// Detector `name`, built by its registration from StackOf(detectors_toml, job_toml).
inline std::unique_ptr<Detector> Make(const std::string& name,
                                      const std::string& detectors_toml = "",
                                      const std::string& job_toml = "") {
  auto d = harness::detectors().at(name).make(StackOf(detectors_toml, job_toml));
  EXPECT_EQ(d->name(), name);
  return d;
}

/// Scan stats of `n` tensors, the one at `first_bad` (-1: none) non-finite.
inline harness::ScanStats Stats(int n, int first_bad) {
  harness::ScanStats st;
  st.nonfinite.assign(size_t(n), 0);
  st.sq_norms.assign(size_t(n), 1.0);
  st.sq_norm = n;
  st.max_abs = 1.0f;
  if (first_bad >= 0) {
    st.nonfinite[size_t(first_bad)] = 1;
    st.first_nonfinite = first_bad;
  }
  return st;
}

/// Three gradients, backward order.
inline const std::vector<std::string>& Backward() {
  static const std::vector<std::string> names = {"head.bias", "head.weight", "layers.0.weight"};
  return names;
}

/// `d`'s check of gradient scan stats over Backward(), the one at `first_bad` (-1: none)
/// non-finite, in the gradients' and the reduced buffer's fields.
inline std::optional<Finding> CheckScan(Detector& d, int first_bad) {
  const harness::ScanStats st = Stats(3, first_bad);
  StepView v;
  v.grad_names = &Backward();
  v.grad_stats = &st;
  v.reduce_stats = &st;
  return d.check(v);
}

}  // namespace nanchaos::detect::fixture
