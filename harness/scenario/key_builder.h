// The fluent builder of key declarations (KeySpec, keys.h), for the fixed tables
// (scenario_schema.cpp), the fault kinds (inject/<kind>.cpp) and the detectors
// (detectors/<name>.cpp):
//
//   Key("factor", KeyType::kFloat, "multiplies the learning rate").required().above(0)
//   Key("bit", KeyType::kInt, "bit of the float32 word to flip").def(30).range(0, 31)
//
// Defined in scenario_schema.cpp. Its own header so that the detectors, which must not reach the
// scenario's fault and expectation types (stack_config.h), can declare keys. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/scenario/keys.h"

namespace nanchaos::harness {

/// Fluent builder for a KeySpec; converts implicitly, so a braced list of Key(...) is a
/// std::vector<KeySpec>.
class Key {
 public:
  Key(std::string name, KeyType type, std::string doc);
  Key& required();
  Key& def(bool v);
  Key& def(int v);  ///< stored as double for float keys
  Key& def(int64_t v);
  Key& def(double v);
  Key& def(const char* v);  ///< stored as a one-element array for kStringOrArray
  Key& def(Value v);
  Key& min(double v);    ///< value >= v
  Key& above(double v);  ///< value > v
  Key& max(double v);    ///< value <= v
  Key& range(double lo, double hi);
  Key& choices(std::vector<std::string> c);
  Key& pattern(std::string regex);
  operator KeySpec() const { return spec_; }  // NOLINT(google-explicit-constructor)

 private:
  KeySpec spec_;
};

}  // namespace nanchaos::harness
