// Scenario -> plan JSON for the Python agent; see plan.h.
#include "harness/scenario/plan.h"

#include <cmath>
#include <optional>
#include <variant>

#include "harness/common/rng.h"
#include "harness/scenario/registry.h"

namespace nanchaos::harness {
namespace {

using nlohmann::ordered_json;

ordered_json number(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  return d;
}

ordered_json ranks_json(const RankSet& r) {
  if (r.all) return "all";
  return r.ranks;
}

ordered_json value_json(const Value& v) {
  struct Visitor {
    ordered_json operator()(bool b) const { return b; }
    ordered_json operator()(int64_t i) const { return i; }
    ordered_json operator()(double d) const { return number(d); }
    ordered_json operator()(const std::string& s) const { return s; }
    ordered_json operator()(const std::vector<std::string>& v) const { return v; }
    ordered_json operator()(const std::vector<int64_t>& v) const { return v; }
    ordered_json operator()(const RankSet& r) const { return ranks_json(r); }
  };
  return std::visit(Visitor{}, v);
}

}  // namespace

ordered_json compile_plan(const Scenario& s, bool dry_run) {
  ordered_json plan;
  plan["version"] = 1;
  plan["scenario"] = s.name;
  plan["seed"] = s.seed;
  plan["steps"] = s.job.steps;
  plan["micro_batches"] = s.job.micro_batches;
  plan["world"] = s.job.ranks;
  plan["collective_timeout_ms"] = s.detectors.collective_timeout_ms;
  plan["dry_run"] = dry_run;
  plan["faults"] = ordered_json::array();
  for (const auto& f : s.faults) {
    ordered_json j;
    j["index"] = f.index;
    j["kind"] = f.kind;
    j["ranks"] = ranks_json(f.ranks);
    j["step"] = f.step;
    j["repeat"] = f.repeat;
    j["probability"] = f.probability;
    j["persistent"] = f.persistent;
    ordered_json params = ordered_json::object();
    ordered_json given = ordered_json::array();
    auto kind = fault_kinds().find(f.kind);
    if (kind != fault_kinds().end()) {
      for (const auto& spec : kind->second.keys) {
        params[spec.name] = f.params.has(spec.name) ? value_json(f.params.get(spec.name)) : nullptr;
        if (f.params.given(spec.name)) given.push_back(spec.name);
      }
    }
    j["params"] = std::move(params);
    j["given"] = std::move(given);
    plan["faults"].push_back(std::move(j));
  }
  return plan;
}

int64_t fault_element_count(const FaultSpec& f, int64_t numel) {
  std::optional<int64_t> count;
  std::optional<double> fraction;
  if (f.params.given("fraction")) {
    fraction = f.params.get_float("fraction");
  } else if (f.params.has("count")) {
    count = f.params.get_int("count");
  }
  return inject::element_count(numel, count, fraction);
}

ordered_json plan_draws(const Scenario& s, int64_t numel) {
  ordered_json out;
  out["scenario"] = s.name;
  out["seed"] = s.seed;
  out["numel"] = numel;
  out["faults"] = ordered_json::array();
  for (const auto& f : s.faults) {
    bool picks = false;
    auto kind = fault_kinds().find(f.kind);
    if (kind != fault_kinds().end()) {
      for (const auto& spec : kind->second.keys) picks = picks || spec.name == "count";
    }
    ordered_json fires = ordered_json::array();
    for (int64_t step = 0; step < s.job.steps; ++step) {
      if (!f.in_window(step)) continue;
      std::vector<int64_t> ranks;
      for (int64_t r = 0; r < s.job.ranks; ++r) {
        if (f.ranks.contains(r) && inject::fires(s.seed, f.index, step, r, f.probability)) {
          ranks.push_back(r);
        }
      }
      if (ranks.empty()) continue;
      ordered_json at = {{"step", step}, {"ranks", ranks}};
      if (picks) {
        at["elements"] =
            inject::pick_elements(s.seed, f.index, step, numel, fault_element_count(f, numel));
      }
      fires.push_back(std::move(at));
    }
    out["faults"].push_back({{"index", f.index}, {"kind", f.kind}, {"fires", std::move(fires)}});
  }
  return out;
}

}  // namespace nanchaos::harness
