// Fault kind `bitflip`: silent data corruption; flips one bit of the IEEE-754 float32 word in
// chosen elements. The injector and its keys live here.
#include <fmt/format.h>

#include <cstring>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

class BitflipInjector final : public TargetedInjector {
 public:
  explicit BitflipInjector(const harness::FaultSpec& f)
      : TargetedInjector(f), bit_(int(f.params.get_int("bit"))) {}

 protected:
  // Silent data corruption: flip one bit of the IEEE-754 float32 word (bit 30 = top exponent bit).
  nlohmann::json corrupt(torch::Tensor t, const std::vector<int64_t>& idx) override {
    auto flat = t.view({-1});
    auto* data = flat.data_ptr<float>();
    nlohmann::json detail{{"bit", bit_}};
    if (!idx.empty()) detail["before"] = fmt::format("{}", data[idx[0]]);
    for (int64_t i : idx) {
      uint32_t w;
      std::memcpy(&w, &data[i], 4);
      w ^= (uint32_t(1) << bit_);
      std::memcpy(&data[i], &w, 4);
    }
    if (!idx.empty()) detail["after"] = fmt::format("{}", data[idx[0]]);
    return detail;
  }

 private:
  int bit_;
};

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo bitflip_kind() {
  FaultKindInfo info;
  info.name = "bitflip";
  info.doc = "flips a bit of the float32 word in chosen elements (silent data corruption)";
  info.keys = {
      Key("target", KeyType::kString,
          "activation:MODULE, parameter:NAME, gradient:NAME or loss (as for tensor)")
          .required(),
      Key("bit", KeyType::kInt, "bit of the float32 word (30 = top exponent bit)")
          .def(30)
          .range(0, 31),
      Key("count", KeyType::kInt, "elements hit").def(1).min(1),
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<BitflipInjector>(f);
  };
  info.target_wheres = harness::all_target_wheres();
  // The target must name something of the configured built-in workload (did-you-mean).
  info.check_job = [](const harness::FaultSpec& f, const harness::Scenario& s) {
    harness::check_target_exists(f, s);
  };
  // Campaigns: a target class with names, then a name; the cause is the target's class.
  info.python_agent = true;
  info.refusal = [](const harness::Scenario&, const harness::CampaignTargets& t, bool) {
    return t.modules.empty() && t.parameters.empty() ? "the job lists no module or parameter" : "";
  };
  // --values finite: a mantissa bit or one of the 4 low exponent bits (23-26: |x| scaled by 2,
  // 4, 16 or 256); never the top exponent bit 30, whose flip makes Inf of any |x| in [1, 2).
  info.values_refusal = [](harness::DrawValues v) -> std::string {
    if (v != harness::DrawValues::kNonfinite) return "";
    return "a bit flip makes NaN or Inf only of some values (bit 30 of |x| in [1, 2)); draw it "
           "with --values any or finite";
  };
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    f["target"] = d.tensor_target();
    if (d.values() == harness::DrawValues::kFinite) {
      f["bit"] = d.finite_bit(harness::float_word(harness::DType::kFp32));
    } else {
      f["bit"] = d.bit(32);
    }
  };
  info.finite = [](const nlohmann::ordered_json& f, const harness::Scenario&) {
    return harness::finite_flip(f.value("bit", int64_t(30)),
                                harness::float_word(harness::DType::kFp32));
  };
  info.fault_class = [](const nlohmann::ordered_json& f) { return harness::drawn_target_where(f); };
  info.truth = harness::tensor_target_truth;
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(bitflip, bitflip_kind());

}  // namespace nanchaos::inject
