// Choices several fault kinds' campaign draws share (see fault_draw.h). The order of the
// generator's calls is part of the draw: a change here moves every campaign's faults.
#include "harness/scenario/fault_draw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

const char* to_string(DrawValues v) {
  switch (v) {
    case DrawValues::kAny:
      return "any";
    case DrawValues::kFinite:
      return "finite";
    case DrawValues::kNonfinite:
      return "nonfinite";
  }
  return "?";
}

std::optional<DrawValues> parse_draw_values(const std::string& text) {
  for (DrawValues v : {DrawValues::kAny, DrawValues::kFinite, DrawValues::kNonfinite}) {
    if (text == to_string(v)) return v;
  }
  return std::nullopt;
}

FloatWord float_word(DType d) {
  switch (d) {
    case DType::kFp16:
      return {10, 5};
    case DType::kBf16:
      return {7, 8};
    default:
      return {23, 8};  // fp32 (a campaign flips bits of float words only)
  }
}

bool finite_flip(int64_t bit, const FloatWord& word) {
  if (bit < 0 || bit >= word.bits()) return false;
  return bit < word.mantissa_bits + word.low_exponent_bits() || bit == word.bits() - 1;
}

bool finite_value(const nlohmann::ordered_json& value) {
  return value.is_number() && std::isfinite(value.get<double>());
}

nlohmann::ordered_json FaultDraw::value() {
  // The non-finite draw takes one value of the stream as the `any` draw does, from three.
  switch (g_.below(values_ == DrawValues::kNonfinite ? 3 : 4)) {
    case 0:
      return "nan";
    case 1:
      return "inf";
    case 2:
      return "-inf";
    default:
      return 1e30;
  }
}

int64_t FaultDraw::bit(int bits) {
  const int64_t top_exponent = bits == 32 ? 30 : 14;
  return g_.below(2) == 0 ? top_exponent : int64_t(g_.below(uint64_t(bits)));
}

double FaultDraw::factor() {
  const double lo = std::log(kFiniteFactorMin), hi = std::log(kFiniteFactorMax);
  const double x = std::round(std::exp(lo + g_.uniform01() * (hi - lo)) * 1000.0) / 1000.0;
  return std::min(kFiniteFactorMax, std::max(kFiniteFactorMin, x));
}

int64_t FaultDraw::finite_bit(const FloatWord& word) {
  return int64_t(g_.below(uint64_t(word.mantissa_bits + word.low_exponent_bits())));
}

std::string FaultDraw::tensor_target() {
  std::vector<TargetWhere> where;
  if (!t_.modules.empty()) where.push_back(TargetWhere::kActivation);
  if (!t_.parameters.empty())
    where.insert(where.end(), {TargetWhere::kParameter, TargetWhere::kGradient});
  where.push_back(TargetWhere::kLoss);
  if (t_.optimizer_state && !s_.job.external() && !t_.parameters.empty()) {
    where.push_back(TargetWhere::kOptimizer);
  }
  Target t{pick(where), ""};
  switch (t.where) {
    case TargetWhere::kLoss:
      break;
    case TargetWhere::kActivation:
      t.pattern = pick(t_.modules);
      break;
    case TargetWhere::kOptimizer:
      t.pattern = pick(t_.parameters);  // then the state: the generator's calls in this order
      t.pattern += g_.below(2) == 0 ? ".exp_avg" : ".exp_avg_sq";
      break;
    case TargetWhere::kParameter:
    case TargetWhere::kGradient:
      t.pattern = pick(t_.parameters);
      break;
  }
  return t.text();
}

std::optional<Target> drawn_target(const nlohmann::ordered_json& fault) {
  if (!fault.contains("target")) return std::nullopt;
  return parse_target(fault.at("target").get<std::string>());
}

std::string drawn_target_where(const nlohmann::ordered_json& fault) {
  const std::optional<Target> t = drawn_target(fault);
  return t ? to_string(t->where) : "";
}

KindTruth tensor_target_truth(const nlohmann::ordered_json& fault) {
  const std::optional<Target> target = drawn_target(fault);
  if (!target)
    throw std::runtime_error("a drawn tensor fault has no valid target: " + fault.dump());
  KindTruth t;
  t.layer = target->where == TargetWhere::kLoss ? "loss" : target->name();
  switch (target->where) {
    case TargetWhere::kActivation:
      t.cause = Cause::kActivation;
      break;
    case TargetWhere::kGradient:
      t.cause = Cause::kGradient;
      break;
    case TargetWhere::kLoss:
      t.cause = Cause::kLossMath;
      break;
    case TargetWhere::kParameter:
    case TargetWhere::kOptimizer:
      t.cause = Cause::kParameter;
      break;
  }
  return t;
}

}  // namespace nanchaos::harness
