// Scenario -> plan JSON for the Python agent; see plan.h.
#include "harness/scenario/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
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

void drop_fired_faults(Scenario& s, const std::vector<int>& fired) {
  s.faults.erase(std::remove_if(s.faults.begin(), s.faults.end(),
                                [&](const FaultSpec& f) {
                                  return !f.persistent && std::find(fired.begin(), fired.end(),
                                                                    f.index) != fired.end();
                                }),
                 s.faults.end());
}

ordered_json compile_plan(const Scenario& s, bool dry_run) {
  ordered_json plan;
  plan["version"] = 1;
  plan["scenario"] = s.name;
  plan["seed"] = s.seed;
  plan["steps"] = s.job.steps;
  plan["micro_batches"] = s.job.micro_batches;
  plan["world"] = s.job.ranks;
  plan["collective_timeout_ms"] = collective_timeout_ms(s.detectors);
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

namespace {

[[noreturn]] void plan_error(const std::string& source, const std::string& what) {
  throw std::runtime_error(source + ": " + what);
}

double special_number(const nlohmann::json& v, const std::string& source, const std::string& at) {
  if (v.is_number()) return v.get<double>();
  if (v == "nan") return std::nan("");
  if (v == "inf") return HUGE_VAL;
  if (v == "-inf") return -HUGE_VAL;
  plan_error(source, at + ": expected a number, \"nan\", \"inf\" or \"-inf\", got " + v.dump());
}

RankSet ranks_of(const nlohmann::json& v, const std::string& source, const std::string& at) {
  RankSet r;
  if (v == "all") {
    r.all = true;
  } else if (v.is_array()) {
    for (const auto& x : v) {
      if (!x.is_number_integer())
        plan_error(source, at + ": a rank is not an integer: " + x.dump());
      r.ranks.push_back(x.get<int64_t>());
    }
  } else {
    plan_error(source, at + ": expected \"all\" or an array of ranks, got " + v.dump());
  }
  return r;
}

std::vector<std::string> strings_of(const nlohmann::json& v, const std::string& source,
                                    const std::string& at) {
  std::vector<std::string> out;
  for (const auto& x : v) {
    if (!x.is_string()) plan_error(source, at + ": expected strings, got " + x.dump());
    out.push_back(x.get<std::string>());
  }
  return out;
}

// One param of a fault back into its Value, by the kind's declared type (compile_plan's
// value_json in reverse).
Value param_value(const KeySpec& spec, const nlohmann::json& v, const std::string& source,
                  const std::string& at) {
  auto want = [&](bool ok, const char* what) {
    if (!ok) plan_error(source, at + ": expected " + what + ", got " + v.dump());
  };
  switch (spec.type) {
    case KeyType::kBool:
      want(v.is_boolean(), "a boolean");
      return v.get<bool>();
    case KeyType::kInt:
    case KeyType::kIntOrForever:
      want(v.is_number_integer(), "an integer");
      return v.get<int64_t>();
    case KeyType::kFloat:
    case KeyType::kFloatOrSpecial:
      return special_number(v, source, at);
    case KeyType::kString:
      want(v.is_string(), "a string");
      return v.get<std::string>();
    case KeyType::kStringOrArray:
      if (v.is_string()) return v.get<std::string>();
      [[fallthrough]];
    case KeyType::kStringArray:
    case KeyType::kStringTable:
      want(v.is_array(), "an array of strings");
      return strings_of(v, source, at);
    case KeyType::kRankSet:
      return ranks_of(v, source, at);
    case KeyType::kIntOrIntArray:
      if (v.is_number_integer()) return v.get<int64_t>();
      want(v.is_array(), "an integer or an array of integers");
      return ranks_of(v, source, at).ranks;
  }
  plan_error(source, at + ": unknown key type");
}

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& source,
        const std::string& at) {
  if (!j.contains(key)) plan_error(source, at + "." + key + " is missing");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    plan_error(source, at + "." + key + " has the wrong type: " + j.at(key).dump());
  }
}

}  // namespace

PlanRead read_plan(const nlohmann::json& plan, const std::string& source) {
  if (!plan.is_object()) plan_error(source, "the plan is not a JSON object");
  if (plan.value("version", 0) != 1) {
    plan_error(source, "plan version " + plan.value("version", nlohmann::json()).dump() +
                           " (this agent reads version 1)");
  }
  PlanRead out;
  Scenario& s = out.scenario;
  s.name = field<std::string>(plan, "scenario", source, "plan");
  s.file = source;
  s.seed = field<uint64_t>(plan, "seed", source, "plan");
  s.job.steps = field<int64_t>(plan, "steps", source, "plan");
  s.job.micro_batches = field<int64_t>(plan, "micro_batches", source, "plan");
  s.job.ranks = field<int64_t>(plan, "world", source, "plan");
  s.detectors.params.set("collective_timeout_ms",
                         field<int64_t>(plan, "collective_timeout_ms", source, "plan"));
  out.dry_run = plan.value("dry_run", false);
  const auto faults = plan.value("faults", nlohmann::json::array());
  if (!faults.is_array()) plan_error(source, "plan.faults is not an array");
  for (size_t i = 0; i < faults.size(); ++i) {
    const auto& j = faults[i];
    const std::string at = fmt::format("plan.faults[{}]", i);
    FaultSpec f;
    f.index = field<int>(j, "index", source, at);
    f.kind = field<std::string>(j, "kind", source, at);
    f.ranks = ranks_of(j.value("ranks", nlohmann::json("all")), source, at + ".ranks");
    f.step = field<int64_t>(j, "step", source, at);
    f.repeat = field<int64_t>(j, "repeat", source, at);
    f.probability = field<double>(j, "probability", source, at);
    f.persistent = field<bool>(j, "persistent", source, at);
    const auto kind = fault_kinds().find(f.kind);
    if (kind == fault_kinds().end()) plan_error(source, at + ": unknown fault kind " + f.kind);
    const auto given = j.value("given", nlohmann::json::array());
    const auto params = j.value("params", nlohmann::json::object());
    for (const auto& spec : kind->second.keys) {
      if (!params.contains(spec.name) || params.at(spec.name).is_null()) continue;
      SourcePos pos;  // "given": where it was written is the plan itself
      if (std::find(given.begin(), given.end(), spec.name) != given.end()) pos.file = source;
      f.params.set(spec.name,
                   param_value(spec, params.at(spec.name), source, at + ".params." + spec.name),
                   pos);
    }
    if (!kind->second.target_wheres.empty() && f.params.has("target")) {
      const std::string& text = f.params.get_string("target");
      f.target = parse_target(text, kind->second.target_wheres);
      if (!f.target) {
        plan_error(source,
                   at + ".params.target: " + target_error(text, kind->second.target_wheres));
      }
    }
    s.faults.push_back(std::move(f));
  }
  return out;
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
