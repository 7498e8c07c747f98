// Fault kind `tensor`: overwrites (or scales) elements of an activation, parameter, gradient or
// the local loss. The injector and its keys live here.
#include <fmt/format.h>

#include <optional>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

class TensorInjector final : public TargetedInjector {
 public:
  explicit TensorInjector(const harness::FaultSpec& f) : TargetedInjector(f) {
    if (f.params.given("factor"))
      factor_ = f.params.get_float("factor");
    else
      value_ = f.params.get_float("value");
  }

 protected:
  nlohmann::json corrupt(torch::Tensor t, const std::vector<int64_t>& idx) override {
    auto flat = t.view({-1});
    auto* data = flat.data_ptr<float>();
    nlohmann::json detail;
    if (!idx.empty()) detail["before"] = fmt::format("{}", data[idx[0]]);
    for (int64_t i : idx) data[i] = factor_ ? float(data[i] * *factor_) : float(value_);
    if (!idx.empty()) detail["after"] = fmt::format("{}", data[idx[0]]);
    return detail;
  }

 private:
  std::optional<double> factor_;
  double value_ = 0;
};

using harness::FaultKindInfo;
using harness::FaultSpec;
using harness::Key;
using harness::KeyType;

FaultKindInfo tensor_kind() {
  FaultKindInfo info;
  info.name = "tensor";
  info.doc = "overwrites (or scales) elements of a module output, parameter, gradient or the loss";
  info.keys = {
      Key("target", KeyType::kString,
          "activation:MODULE, parameter:NAME, gradient:NAME or loss (`*` matches one path segment)")
          .required(),
      Key("value", KeyType::kFloatOrSpecial, "what the chosen elements become").def("nan"),
      Key("factor", KeyType::kFloat, "multiply the chosen elements instead of overwriting them"),
      Key("count", KeyType::kInt, "elements hit (default 1 unless `fraction` is given)")
          .def(1)
          .min(1),
      Key("fraction", KeyType::kFloat, "share of the elements hit instead of `count`")
          .above(0)
          .max(1),
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<TensorInjector>(f);
  };
  info.target_wheres = harness::all_target_wheres();
  info.check = [](const FaultSpec& f) {
    harness::check_exclusive(f, "value", "factor");
    harness::check_exclusive(f, "count", "fraction");
  };
  // The target must name something of the configured built-in workload (did-you-mean).
  info.check_job = [](const harness::FaultSpec& f, const harness::Scenario& s) {
    harness::check_target_exists(f, s);
  };
  // Campaigns: a target class with names, then a name; the cause is the target's class.
  info.python_agent = true;
  info.refusal = [](const harness::Scenario&, const harness::CampaignTargets& t, bool) {
    return t.modules.empty() && t.parameters.empty() ? "the job lists no module or parameter" : "";
  };
  // --values finite: a factor in [1.01, 100] instead of a value (finite SDC: a wrong number).
  info.values_refusal = [](harness::DrawValues) { return std::string(); };
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    f["target"] = d.tensor_target();
    if (d.values() == harness::DrawValues::kFinite) {
      f["factor"] = d.factor();
    } else {
      f["value"] = d.value();
    }
  };
  info.finite = [](const nlohmann::ordered_json& f, const harness::Scenario&) {
    return f.contains("factor") || (f.contains("value") && harness::finite_value(f.at("value")));
  };
  info.fault_class = [](const nlohmann::ordered_json& f) { return harness::drawn_target_where(f); };
  info.truth = harness::tensor_target_truth;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(tensor, tensor_kind());

}  // namespace nanchaos::inject
