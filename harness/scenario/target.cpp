// The one parser of a fault's target text; see target.h. The Python twin
// (inject/python/nanchaos/target.py) must agree on every case of tests/data/target_vectors.json.
#include "harness/scenario/target.h"

#include <fmt/format.h>

namespace nanchaos::harness {

const char* to_string(TargetWhere w) {
  switch (w) {
    case TargetWhere::kActivation:
      return "activation";
    case TargetWhere::kParameter:
      return "parameter";
    case TargetWhere::kGradient:
      return "gradient";
    case TargetWhere::kOptimizer:
      return "optimizer";
    case TargetWhere::kLoss:
      return "loss";
  }
  return "loss";
}

const std::vector<TargetWhere>& all_target_wheres() {
  static const std::vector<TargetWhere> all = {TargetWhere::kActivation, TargetWhere::kParameter,
                                               TargetWhere::kGradient, TargetWhere::kOptimizer,
                                               TargetWhere::kLoss};
  return all;
}

std::optional<TargetWhere> target_where_from_string(const std::string& text) {
  for (TargetWhere w : all_target_wheres()) {
    if (text == to_string(w)) return w;
  }
  return std::nullopt;
}

std::string Target::text() const {
  return where == TargetWhere::kLoss ? "loss" : std::string(to_string(where)) + ":" + pattern;
}

// PARAM.STATE splits at the last '.', as Python's str.rpartition: the twin agrees.
std::string Target::name() const {
  if (where != TargetWhere::kOptimizer) return pattern;
  const auto dot = pattern.rfind('.');
  return dot == std::string::npos ? "" : pattern.substr(0, dot);
}

std::string Target::state() const {
  if (where != TargetWhere::kOptimizer) return "";
  const auto dot = pattern.rfind('.');
  return dot == std::string::npos ? pattern : pattern.substr(dot + 1);
}

std::optional<Target> parse_target(const std::string& text) {
  if (text == "loss") return Target{TargetWhere::kLoss, ""};
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return std::nullopt;
  const auto where = target_where_from_string(text.substr(0, colon));
  if (!where || *where == TargetWhere::kLoss) return std::nullopt;
  return Target{*where, text.substr(colon + 1)};
}

std::optional<Target> parse_target(const std::string& text,
                                   const std::vector<TargetWhere>& allowed) {
  std::optional<Target> t = parse_target(text);
  for (TargetWhere w : allowed) {
    if (t && t->where == w) return t;
  }
  return std::nullopt;
}

std::string target_forms(const std::vector<TargetWhere>& allowed) {
  std::string out;
  for (TargetWhere w : allowed) {
    if (!out.empty()) out += " or ";
    if (w == TargetWhere::kLoss) {
      out += "\"loss\"";
    } else {
      out += std::string(to_string(w)) + (w == TargetWhere::kOptimizer ? ":PARAM.STATE" : ":NAME");
    }
  }
  return out;
}

std::string target_error(const std::string& text, const std::vector<TargetWhere>& allowed) {
  return fmt::format("\"{}\" is not a valid target; expected {}", text, target_forms(allowed));
}

}  // namespace nanchaos::harness
