// Fault kind `overflow`: an fp16 overflow point; multiplies a module's output by `factor` so it
// leaves the half range.
#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

// Multiplies the whole module output by `factor` (autograd flows through the product, as it would
// through a layer whose weights produce large values). Under precision fp16 the rounding that
// follows the module turns the values beyond 65504 into +-inf: a real fp16 overflow.
class OverflowInjector final : public Injector {
 public:
  explicit OverflowInjector(const harness::FaultSpec& f)
      : Injector(f), pattern_(f.target.value().pattern), factor_(f.params.get_float("factor")) {}
  torch::Tensor on_activation(FaultContext& ctx, const std::string& module,
                              torch::Tensor out) override {
    if (!match_target(pattern_, module) || !armed(ctx)) return out;
    ctx.fired(spec_.index, "activation:" + module,
              {{"factor", factor_}, {"max_abs_before", out.detach().abs().max().item<double>()}});
    return out * factor_;
  }

 private:
  std::string pattern_;
  double factor_;
};

using harness::FaultKindInfo;
using harness::FaultSpec;
using harness::Key;
using harness::KeyType;

FaultKindInfo overflow_kind() {
  FaultKindInfo info;
  info.name = "overflow";
  info.doc = "multiplies a module's output so it leaves the half range (fp16 overflow point)";
  info.keys = {
      Key("target", KeyType::kString, "activation:MODULE whose output is scaled").required(),
      Key("factor", KeyType::kFloat, "multiplier applied to the module's output").def(1e5).above(0),
  };
  info.make = [](const FaultSpec& f, const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<OverflowInjector>(f);
  };
  info.target_wheres = {harness::TargetWhere::kActivation};
  // The target must name something of the configured built-in workload (did-you-mean).
  info.check_job = [](const harness::FaultSpec& f, const harness::Scenario& s) {
    harness::check_target_exists(f, s);
  };
  // Campaigns: a module of the job, on a half-precision job only (or when asked for by name on
  // an external job, whose precision is its own).
  info.python_agent = true;
  info.refusal = [](const harness::Scenario& s, const harness::CampaignTargets& t,
                    bool requested) -> std::string {
    if (t.modules.empty()) return "the job lists no module to overflow";
    if (s.job.external() && !requested) {
      return "an external job's precision is its own (name overflow in --kinds to draw it)";
    }
    const bool half =
        s.job.precision == harness::DType::kFp16 || s.job.precision == harness::DType::kBf16;
    if (!s.job.external() && !half) {
      return "needs [job].precision = \"fp16\" or \"bf16\" (an fp32 module does not overflow "
             "at the half range)";
    }
    return "";
  };
  info.values_refusal = [](harness::DrawValues v) -> std::string {
    return v == harness::DrawValues::kFinite
               ? "it scales a module's output past the half range (Inf by design); draw it with "
                 "--values any or nonfinite"
               : "";
  };
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    f["target"] =
        harness::Target{harness::TargetWhere::kActivation, d.pick(d.targets().modules)}.text();
  };
  info.truth = [](const nlohmann::ordered_json& f) {
    const auto target = harness::drawn_target(f);
    return harness::KindTruth{harness::Cause::kFp16Overflow,
                              target ? std::optional<std::string>(target->name()) : std::nullopt};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(overflow, overflow_kind());

}  // namespace nanchaos::inject
