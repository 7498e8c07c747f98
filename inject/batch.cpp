// Fault kind `batch`: corrupts the rank's batch before the model sees it (bad values, a constant
// input column, an all-padding target mask). The injector and its keys live here.
#include <fmt/format.h>

#include <optional>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

class BatchInjector final : public Injector {
 public:
  explicit BatchInjector(const harness::FaultSpec& f) : Injector(f) {
    const auto& p = f.params;
    mode_ = p.has("mode") ? p.get_string("mode") : "";
    field_ = p.get_string("field");
    value_ = p.get_float("value");
    if (mode_ == "constant_column") column_ = p.get_int("column");
  }

  void on_batch(FaultContext& ctx, harness::Batch& b) override {
    if (!armed(ctx)) return;
    torch::NoGradGuard no_grad;
    if (mode_ == "constant_column") {
      // Every sample gets sample 0's value in this feature: a zero standard deviation.
      auto col = b.inputs.select(1, column_);
      col.fill_(col[0].item<float>());
      ctx.fired(spec_.index, "inputs", {{"mode", mode_}, {"column", column_}});
      return;
    }
    if (mode_ == "empty_mask") {
      b.mask.zero_();
      ctx.fired(spec_.index, "labels", {{"mode", mode_}});
      return;
    }
    torch::Tensor& t = field_ == "labels" ? b.labels : b.inputs;
    auto flat = t.view({-1});
    auto idx = pick_elements(flat.numel(), ctx);
    auto* data = flat.data_ptr<float>();
    for (int64_t i : idx) data[i] = float(value_);
    ctx.fired(spec_.index, field_,
              {{"elements", idx.size()}, {"value", fmt::format("{}", value_)}});
  }

 private:
  std::string mode_, field_;
  double value_ = 0;
  int64_t column_ = 0;
};

using harness::FaultKindInfo;
using harness::FaultSpec;
using harness::Key;
using harness::KeyType;

FaultKindInfo batch_kind() {
  FaultKindInfo info;
  info.name = "batch";
  info.doc = "corrupts the rank's batch (inputs or labels) before the model sees it";
  info.keys = {
      Key("field", KeyType::kString, "which part of the batch to corrupt")
          .def("inputs")
          .choices({"inputs", "labels"}),
      Key("value", KeyType::kFloatOrSpecial, "what the chosen elements become").def("nan"),
      Key("count", KeyType::kInt, "elements hit (default 1 unless `fraction` is given)")
          .def(1)
          .min(1),
      Key("fraction", KeyType::kFloat, "share of the elements hit instead of `count`")
          .above(0)
          .max(1),
      Key("mode", KeyType::kString,
          "constant_column: one input feature constant (with `column`); empty_mask (transformer): "
          "every target token marked as padding")
          .choices({"constant_column", "empty_mask"}),
      Key("column", KeyType::kInt, "constant_column: the input feature made constant").min(0),
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<BatchInjector>(f);
  };
  info.check = [](const FaultSpec& f) {
    const harness::Params& p = f.params;
    const std::string label = harness::fault_label(f);
    harness::check_exclusive(f, "count", "fraction");
    const std::string mode = p.has("mode") ? p.get_string("mode") : "";
    if (mode == "constant_column" && !p.has("column")) {
      harness::scenario_error(p.pos("mode"), label + ": mode = \"constant_column\" needs `column`");
    }
    if (mode != "constant_column" && p.given("column")) {
      harness::scenario_error(p.pos("column"),
                              label + ".column: only used with mode = \"constant_column\"");
    }
    if (!mode.empty()) {
      for (const char* key : {"field", "value", "count", "fraction"}) {
        if (p.given(key)) {
          harness::scenario_error(p.pos(key),
                                  label + "." + key + ": not used with mode = \"" + mode + "\"");
        }
      }
    }
  };
  info.check_job = [](const harness::FaultSpec& f, const harness::Scenario& s) {
    // An external job's inputs are its own (the loader refuses empty_mask there).
    if (s.job.external()) return;
    const harness::Params& p = f.params;
    const std::string label = harness::fault_label(f);
    const std::string mode = p.has("mode") ? p.get_string("mode") : "";
    const bool mlp = s.job.workload == harness::WorkloadKind::kMlp;
    const bool float_labels = s.workload.loss == harness::LossKind::kMse ||
                              s.workload.loss == harness::LossKind::kMaskedMse;
    if (mode == "empty_mask" && mlp) {
      harness::scenario_error(p.pos("mode"), label +
                                                 ": mode = \"empty_mask\" needs workload = "
                                                 "\"transformer\" (the mlp has no token mask)");
    }
    if (mode == "constant_column") {
      if (!mlp) {
        harness::scenario_error(p.pos("mode"), label +
                                                   ": mode = \"constant_column\" needs "
                                                   "workload = \"mlp\" (float input features)");
      }
      if (p.get_int("column") >= s.workload.features) {
        harness::scenario_error(
            p.pos("column"),
            label + ".column: " + std::to_string(p.get_int("column")) +
                " is out of range; the mlp has features = " + std::to_string(s.workload.features));
      }
    }
    if (!mode.empty()) return;
    const std::string field = p.get_string("field");
    if (field == "inputs" && !mlp) {
      harness::scenario_error(p.pos("field"),
                              label +
                                  ": transformer inputs are token ids and cannot hold a float "
                                  "value; use mode = \"empty_mask\" or a tensor fault on "
                                  "activation:embed");
    }
    if (field == "labels" && !float_labels) {
      harness::scenario_error(p.pos("field"),
                              label +
                                  ": labels are class indices for this loss and cannot hold a "
                                  "float value; use loss = \"mse\" or \"masked_mse\" (mlp)");
    }
  };
  // Campaigns: a variant the job's batch can hold (its inputs, float labels, a feature column,
  // the transformer's mask); its cause is the data, its layer the part of the batch hit.
  info.python_agent = true;
  info.values_refusal = [](harness::DrawValues v) -> std::string {
    if (v != harness::DrawValues::kFinite) return "";
    return "its corruptions write NaN or Inf into the batch or make 0/0 (constant_column, "
           "empty_mask); draw it with --values any or nonfinite";
  };
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    const harness::Scenario& s = d.scenario();
    const bool external = s.job.external();
    const bool mlp = s.job.workload == harness::WorkloadKind::kMlp;
    std::vector<std::string> variants;
    if (external || mlp) variants.push_back("inputs");
    if (!external && mlp &&
        (s.workload.loss == harness::LossKind::kMse ||
         s.workload.loss == harness::LossKind::kMaskedMse)) {
      variants.push_back("labels");
    }
    if (!external && mlp && s.workload.normalize_inputs) variants.push_back("constant_column");
    if (!external && !mlp) variants.push_back("empty_mask");
    const std::string v = d.pick(variants);
    if (v == "constant_column") {
      f["mode"] = v;
      f["column"] = int64_t(d.below(uint64_t(s.workload.features)));
    } else if (v == "empty_mask") {
      f["mode"] = v;
    } else {
      f["field"] = v;
      f["value"] = d.value();
    }
  };
  info.fault_class = [](const nlohmann::ordered_json& f) {
    return f.contains("mode") ? f.at("mode").get<std::string>() : f.at("field").get<std::string>();
  };
  // The `any` draw's 1e30 is a finite (if huge) number in the batch; the modes make 0/0.
  info.finite = [](const nlohmann::ordered_json& f, const harness::Scenario&) {
    return !f.contains("mode") && f.contains("value") && harness::finite_value(f.at("value"));
  };
  info.truth = [](const nlohmann::ordered_json& f) {
    harness::KindTruth t{harness::Cause::kData, std::nullopt};
    if (!f.contains("mode")) t.layer = f.at("field").get<std::string>();
    if (f.contains("mode") && f.at("mode") == "constant_column") t.layer = "inputs";
    return t;
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(batch, batch_kind());

}  // namespace nanchaos::inject
