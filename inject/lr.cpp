// Fault kind `lr`: multiplies the scheduled learning rate on the hit ranks (a learning-rate
// blow-up that turns into Inf/NaN organically). The injector and its keys live here.
#include <fmt/format.h>

#include <optional>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/key_builder.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

class LrInjector final : public Injector {
 public:
  explicit LrInjector(const harness::FaultSpec& f)
      : Injector(f), factor_(f.params.get_float("factor")) {}
  double lr_factor(FaultContext& ctx) override {
    if (!armed(ctx)) return 1.0;
    ctx.fired(spec_.index, "lr", {{"factor", factor_}});
    return factor_;
  }

 private:
  double factor_;
};

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo lr_kind() {
  FaultKindInfo info;
  info.name = "lr";
  info.doc = "multiplies the scheduled learning rate on the hit ranks";
  info.keys = {
      Key("factor", KeyType::kFloat, "learning-rate multiplier (1e3 to 1e5 blows training up)")
          .required()
          .above(0),
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<LrInjector>(f);
  };
  // Campaigns: a factor that blows training up; no layer is to blame.
  info.python_agent = true;
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    static const std::vector<double> factors = {1e3, 1e4, 1e5};
    f["factor"] = d.pick(factors);
  };
  // A learning rate 1e3-1e5 times larger is a finite number: drawn as it is under --values
  // finite (the blow-up it starts is the job's own arithmetic), refused under nonfinite.
  info.values_refusal = [](harness::DrawValues v) -> std::string {
    return v == harness::DrawValues::kNonfinite
               ? "its factor is a finite number (the job's arithmetic may blow up to Inf later); "
                 "draw it with --values any or finite"
               : "";
  };
  info.finite = [](const nlohmann::ordered_json&, const harness::Scenario&) { return true; };
  info.truth = [](const nlohmann::ordered_json&) {
    return harness::KindTruth{harness::Cause::kGradientExplosion, std::nullopt};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(lr, lr_kind());

}  // namespace nanchaos::inject
