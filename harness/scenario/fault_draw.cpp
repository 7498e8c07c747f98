// Choices several fault kinds' campaign draws share (see fault_draw.h). The order of the
// generator's calls is part of the draw: a change here moves every campaign's faults.
#include "harness/scenario/fault_draw.h"

#include "harness/scenario/scenario.h"

namespace nanchaos::harness {

nlohmann::ordered_json FaultDraw::value() {
  switch (g_.below(4)) {
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

std::string FaultDraw::tensor_target() {
  std::vector<std::string> where;
  if (!t_.modules.empty()) where.push_back("activation");
  if (!t_.parameters.empty()) where.insert(where.end(), {"parameter", "gradient"});
  where.push_back("loss");
  if (t_.optimizer_state && !s_.job.external() && !t_.parameters.empty()) {
    where.push_back("optimizer");
  }
  const std::string w = pick(where);
  if (w == "loss") return "loss";
  if (w == "activation") return "activation:" + pick(t_.modules);
  if (w == "optimizer") {
    const std::string& p = pick(t_.parameters);
    return "optimizer:" + p + (g_.below(2) == 0 ? ".exp_avg" : ".exp_avg_sq");
  }
  return w + ":" + pick(t_.parameters);
}

std::string target_where(const std::string& target) { return target.substr(0, target.find(':')); }

std::string target_name(const std::string& target) {
  const auto colon = target.find(':');
  if (colon == std::string::npos) return "";
  std::string name = target.substr(colon + 1);
  if (target_where(target) == "optimizer") name = name.substr(0, name.rfind('.'));  // PARAM.STATE
  return name;
}

KindTruth tensor_target_truth(const nlohmann::ordered_json& fault) {
  const std::string target = fault.at("target").get<std::string>();
  const std::string where = target_where(target);
  KindTruth t;
  t.layer = where == "loss" ? "loss" : target_name(target);
  t.cause = where == "activation" ? Cause::kActivation
            : where == "gradient" ? Cause::kGradient
            : where == "loss"     ? Cause::kLossMath
                                  : Cause::kParameter;
  return t;
}

}  // namespace nanchaos::harness
