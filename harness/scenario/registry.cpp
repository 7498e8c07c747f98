// Fault-kind and detector registries (see registry.h).
//
// The maps are function-local statics so that registrars in other translation units may run in
// any static-initialization order: the first call constructs the map.
#include "harness/scenario/registry.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "harness/scenario/scenario.h"

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

[[noreturn]] void die_detector(const std::string& name, const char* why) {
  std::fprintf(stderr, "nanchaos: detector \"%s\" cannot be registered: %s\n", name.c_str(), why);
  std::abort();
}

// A kind file that forgot a rule would otherwise fail only when a campaign first draws it.
[[noreturn]] void die_fault_kind(const std::string& name, const char* what) {
  std::fprintf(stderr,
               "nanchaos: fault kind \"%s\" (inject/%s.cpp) registers no %s: every built kind "
               "declares it in its FaultKindInfo (harness/scenario/registry.h)\n",
               name.c_str(), name.c_str(), what);
  std::abort();
}

std::atomic<bool> order_read{false};

}  // namespace

bool register_fault_kind(FaultKindInfo info, bool keys_only) {
  auto& kinds = fault_kinds();
  if (info.name.empty() || kinds.count(info.name) != 0) die("fault kind", info.name);
  if (!keys_only) {
    if (!info.make) die_fault_kind(info.name, "injector factory (`make`)");
    if (!info.truth) die_fault_kind(info.name, "ground truth for campaigns (`truth`)");
    if (!info.draw) die_fault_kind(info.name, "campaign draw of its keys (`draw`)");
  }
  std::string name = info.name;
  kinds.emplace(std::move(name), std::move(info));
  return true;
}

const FaultKindInfo* find_fault_kind(const std::string& name) {
  const auto it = fault_kinds().find(name);
  return it == fault_kinds().end() ? nullptr : &it->second;
}

bool any_fault_kind(const std::vector<FaultSpec>& faults, bool FaultKindInfo::*flag) {
  for (const auto& f : faults) {
    const FaultKindInfo* info = find_fault_kind(f.kind);
    if (info != nullptr && info->*flag) return true;
  }
  return false;
}

bool register_detector(DetectorInfo info) {
  auto& all = detectors();
  if (info.name.empty() || all.count(info.name) != 0) die("detector", info.name);
  if (order_read) die_detector(info.name, "registered after the pipeline order was read");
  if (info.order < 0) die_detector(info.name, "no pipeline `order` in its DetectorInfo");
  for (const auto& [other, o] : all) {
    if (o.order == info.order) die_detector(info.name, "its `order` is taken by another detector");
  }
  if (all.size() >= kMaxDetectors) die_detector(info.name, "more than kMaxDetectors detectors");
  std::string name = info.name;
  all.emplace(std::move(name), std::move(info));
  return true;
}

const std::vector<std::string>& detector_order() {
  static const std::vector<std::string> names = [] {
    order_read = true;
    std::vector<const DetectorInfo*> sorted;
    for (const auto& [name, info] : detectors()) sorted.push_back(&info);
    std::sort(sorted.begin(), sorted.end(),
              [](const DetectorInfo* a, const DetectorInfo* b) { return a->order < b->order; });
    std::vector<std::string> out;
    for (const DetectorInfo* info : sorted) out.push_back(info->name);
    return out;
  }();
  return names;
}

}  // namespace nanchaos::harness
