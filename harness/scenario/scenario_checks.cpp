// The helpers every key declaration shares (scenario_schema.h): how a key's accepted values and
// a number are written in messages, the scenario error itself, and the cross-key checks fault
// kinds run in their `check` (target forms, targets that name nothing of the model, exclusive
// keys). The key tables are in scenario_schema.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <string>

#include "harness/scenario/model_spec.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness {

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::string describe_expected(const KeySpec& spec) {
  const bool has_min = std::isfinite(spec.min);
  const bool has_max = std::isfinite(spec.max);
  std::string range;
  if (has_min && has_max) {
    range = fmt::format("in {}{}, {}]", spec.min_exclusive ? "(" : "[", format_number(spec.min),
                        format_number(spec.max));
  } else if (has_min) {
    range = fmt::format("{} {}", spec.min_exclusive ? ">" : ">=", format_number(spec.min));
  } else if (has_max) {
    range = fmt::format("<= {}", format_number(spec.max));
  }
  std::string out;
  switch (spec.type) {
    case KeyType::kInt:
    case KeyType::kFloat:
      out = type_name(spec.type) + (range.empty() ? "" : " " + range);
      break;
    case KeyType::kIntOrForever:
      out = "integer" + (range.empty() ? "" : " " + range) + " or \"forever\"";
      break;
    case KeyType::kIntOrIntArray:
      out = type_name(spec.type) + (range.empty() ? "" : " (each " + range + ")");
      break;
    default:
      out = type_name(spec.type);
      break;
  }
  if (!spec.choices.empty()) out += " (one of: " + join(spec.choices) + ")";
  return out;
}

void scenario_error(const SourcePos& pos, const std::string& message) {
  throw ScenarioError(pos.str() + ": error: " + message);
}

std::string fault_label(const FaultSpec& fault) {
  return "[[fault]] #" + std::to_string(fault.index + 1);
}

void check_exclusive(const FaultSpec& fault, const std::string& a, const std::string& b) {
  if (fault.params.given(a) && fault.params.given(b)) {
    // Point at whichever of the two was written second.
    SourcePos pa = fault.params.pos(a), pb = fault.params.pos(b);
    bool a_later = pa.line > pb.line || (pa.line == pb.line && pa.col > pb.col);
    scenario_error(a_later ? pa : pb,
                   fmt::format("{}: `{}` and `{}` are exclusive; write one of them",
                               fault_label(fault), a, b));
  }
}

std::string name_hint(const std::string& name, const std::vector<std::string>& names,
                      const std::string& prefix, const std::string& label, const Scenario& s) {
  // A block index past the end: say how many there are rather than guess a neighbour.
  static const std::regex indexed(R"(^(layers|blocks)\.([0-9]+)(\..*)?$)");
  const std::string blocks = s.job.workload == WorkloadKind::kTransformer ? "blocks" : "layers";
  std::smatch m;
  if (std::regex_match(name, m, indexed) && m[1] == blocks && m[2].length() < 18 &&
      std::stoll(m[2]) >= s.workload.layers) {
    return fmt::format("; [workload].layers = {} gives {}.0 .. {}.{}", s.workload.layers, blocks,
                       blocks, s.workload.layers - 1);
  }
  constexpr size_t kShown = 24;
  const std::string near = nearest(name, names);
  std::string out = near.empty() ? ";" : "; did you mean \"" + prefix + near + "\"?";
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kShown));
  out += " " + label + ": " + join(shown);
  if (names.size() > kShown) {
    out += fmt::format(", ... ({} more; `nanchaos targets {}` lists them)", names.size() - kShown,
                       s.file);
  }
  return out;
}

void check_target_exists(const FaultSpec& fault, const Scenario& s) {
  if (!fault.target || fault.target->where == TargetWhere::kLoss) return;
  const std::optional<ModelSpec> model = listed_model(s);
  if (!model) return;
  const Target& target = *fault.target;
  const SourcePos& pos = fault.params.pos("target");
  const std::string label = fault_label(fault) + ".target";
  std::vector<std::string> names;
  switch (target.where) {
    case TargetWhere::kActivation:
      names = model->modules;
      break;
    case TargetWhere::kParameter:
    case TargetWhere::kGradient:
      for (const auto& p : model->parameters) names.push_back(p.name);
      break;
    case TargetWhere::kOptimizer:
      // The state LibTorch's optimizers keep per parameter (PyTorch's names). This SGD runs
      // without momentum, so it keeps none.
      if (s.workload.optimizer == Optimizer::kSgd) {
        scenario_error(pos, fmt::format("{}: \"{}\": [workload].optimizer = \"sgd\" runs without "
                                        "momentum and keeps no optimizer state; optimizer: targets "
                                        "need \"adam\" or \"adamw\" (exp_avg, exp_avg_sq)",
                                        label, target.text()));
      }
      for (const auto& p : model->parameters) {
        for (const char* st : {"exp_avg", "exp_avg_sq"}) names.push_back(p.name + "." + st);
      }
      break;
    case TargetWhere::kLoss:
      return;
  }
  for (const auto& n : names) {
    if (match_target(target.pattern, n)) return;
  }
  const bool module = target.where == TargetWhere::kActivation;
  const bool state = target.where == TargetWhere::kOptimizer;
  scenario_error(
      pos, fmt::format("{}: \"{}\" names no {} of the {} workload{}", label, target.text(),
                       module  ? "module"
                       : state ? "optimizer state (PARAM.exp_avg or PARAM.exp_avg_sq)"
                               : "parameter",
                       workload_name(s.job.workload),
                       name_hint(target.pattern, names, std::string(to_string(target.where)) + ":",
                                 module  ? "modules"
                                 : state ? "optimizer states"
                                         : "parameters",
                                 s)));
}

bool match_target(const std::string& pattern, const std::string& name) {
  size_t p = 0, n = 0;
  while (p < pattern.size()) {
    if (pattern[p] == '*') {
      // '*' consumes characters of the current segment only.
      while (n < name.size() && name[n] != '.') ++n;
      ++p;
      continue;
    }
    if (n >= name.size() || pattern[p] != name[n]) return false;
    ++p;
    ++n;
  }
  return n == name.size();
}

}  // namespace nanchaos::harness
