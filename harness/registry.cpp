// Fault-kind and detector registries (see registry.h).
//
// The maps are function-local statics so that registrars in other translation units may run in
// any static-initialization order: the first call constructs the map.
#include "harness/registry.h"

#include <cstdio>
#include <cstdlib>

namespace nanchaos::harness {

std::map<std::string, FaultKindInfo>& fault_kinds() {
  static std::map<std::string, FaultKindInfo> kinds;
  return kinds;
}

std::map<std::string, DetectorInfo>& detectors() {
  static std::map<std::string, DetectorInfo> all;
  return all;
}

namespace {

// Runs during static initialization, before main and before any logger exists: stderr and abort
// are the only honest ways to report a build that registers one name twice.
[[noreturn]] void die(const char* what, const std::string& name) {
  if (name.empty()) {
    std::fprintf(stderr, "nanchaos: a %s was registered with an empty name\n", what);
  } else {
    std::fprintf(stderr, "nanchaos: %s \"%s\" registered twice (two files declare it)\n", what,
                 name.c_str());
  }
  std::abort();
}

}  // namespace

bool register_fault_kind(FaultKindInfo info) {
  auto& kinds = fault_kinds();
  if (info.name.empty() || kinds.count(info.name) != 0) die("fault kind", info.name);
  std::string name = info.name;
  kinds.emplace(std::move(name), std::move(info));
  return true;
}

bool register_detector(DetectorInfo info) {
  auto& all = detectors();
  if (info.name.empty() || all.count(info.name) != 0) die("detector", info.name);
  std::string name = info.name;
  all.emplace(std::move(name), std::move(info));
  return true;
}

}  // namespace nanchaos::harness
