// Fault kind `state` (SCENARIO_FORMAT.md "More faults"): changes one rank's training state, not a
// tensor: its loss scale, its learning rate (from the fault's step on) or its optimizer step
// counter, as a rank that resumed from a different checkpoint or skipped a scaler update would
// (pytorch 136009, 90057). The replicas then apply different updates and drift apart while
// every value stays finite: the `replica` detector's case. The injector and its keys live here.
#include <fmt/format.h>

#include <cmath>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

class StateInjector final : public Injector {
 public:
  explicit StateInjector(const harness::FaultSpec& f)
      : Injector(f), field_(f.params.get_string("field")) {
    if (f.params.given("value")) value_ = f.params.get_float("value");
    if (f.params.given("factor")) factor_ = f.params.get_float("factor");
  }

  void on_training_state(FaultContext& ctx, TrainingState& st) override {
    if (!armed(ctx)) return;
    if (field_ == "step_counter") {
      if (!st.step_counters || st.step_counters->empty()) return;  // no state yet: not fired
      const int64_t before = st.step_counters->front();
      for (int64_t& c : *st.step_counters) c = int64_t(std::llround(apply(double(c))));
      ctx.fired(spec_.index, "state:step_counter",
                {{"before", before}, {"after", st.step_counters->front()}});
      return;
    }
    double* x = field_ == "loss_scale" ? st.loss_scale : st.lr_factor;
    if (!x) return;
    const double before = *x;
    *x = apply(*x);
    ctx.fired(spec_.index, "state:" + field_, {{"before", before}, {"after", *x}});
  }

 private:
  double apply(double x) const { return value_ ? *value_ : x * *factor_; }
  std::string field_;
  std::optional<double> value_, factor_;
};

using harness::FaultKindInfo;
using harness::FaultSpec;
using harness::Key;
using harness::KeyType;

FaultKindInfo state_kind() {
  FaultKindInfo info;
  info.name = "state";
  info.doc = "changes one rank's training state: loss scale, learning rate or step counter";
  info.keys = {
      Key("field", KeyType::kString,
          "which state: loss_scale (fp16's dynamic scaler), lr (a factor on the scheduled "
          "learning rate from the fault's step on), step_counter (Adam's step)")
          .required()
          .choices({"loss_scale", "lr", "step_counter"}),
      Key("value", KeyType::kFloat, "the new value (lr: the new factor on the schedule)").above(0),
      Key("factor", KeyType::kFloat, "multiply the current value instead").above(0),
  };
  info.check = [](const FaultSpec& f) {
    harness::check_exclusive(f, "value", "factor");
    if (!f.params.given("value") && !f.params.given("factor")) {
      harness::scenario_error(f.params.pos("field"), harness::fault_label(f) +
                                                         ": kind \"state\" needs `value` or "
                                                         "`factor`");
    }
  };
  info.check_job = [](const FaultSpec& f, const harness::Scenario& s) {
    const std::string field = f.params.get_string("field");
    if (field == "loss_scale" && s.job.precision != harness::DType::kFp16) {
      harness::scenario_error(
          f.params.pos("field"),
          harness::fault_label(f) +
              ".field: \"loss_scale\" needs [job].precision = \"fp16\" (only fp16 runs a "
              "dynamic loss scaler, as with GradScaler)");
    }
    if (field == "step_counter" && s.workload.optimizer == harness::Optimizer::kSgd) {
      harness::scenario_error(f.params.pos("field"),
                              harness::fault_label(f) +
                                  ".field: \"step_counter\" needs [workload].optimizer = "
                                  "\"adam\" or \"adamw\" (SGD keeps no step counter)");
    }
  };
  info.make = [](const FaultSpec& f, const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<StateInjector>(f);
  };
  // Its hook runs at step start (the built-in loop calls it only for such kinds). The Python
  // agent does not apply it: external jobs are refused by the loader and never drawn.
  info.edits_training_state = true;
  // Campaigns: a state the job keeps (the fp16 scaler's scale, Adam's step counter); the
  // replicas then drift apart while every value stays finite.
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    const harness::Scenario& s = d.scenario();
    std::vector<std::string> fields = {"lr"};
    if (s.job.precision == harness::DType::kFp16) fields.push_back("loss_scale");
    if (s.workload.optimizer != harness::Optimizer::kSgd) fields.push_back("step_counter");
    const std::string field = d.pick(fields);
    f["field"] = field;
    if (field == "step_counter") {
      f["value"] = 1e6;
    } else {
      f["factor"] = field == "lr" ? 1e3 : 1e4;
    }
  };
  info.fault_class = [](const nlohmann::ordered_json& f) {
    return f.at("field").get<std::string>();
  };
  // Every state it writes is a finite number (a factor, a step counter).
  info.values_refusal = [](harness::DrawValues v) -> std::string {
    return v == harness::DrawValues::kNonfinite
               ? "it writes a finite training state (a factor of the loss scale or LR, a step "
                 "counter); draw it with --values any or finite"
               : "";
  };
  info.finite = [](const nlohmann::ordered_json&, const harness::Scenario&) { return true; };
  info.truth = [](const nlohmann::ordered_json&) {
    return harness::KindTruth{harness::Cause::kReplicaDivergence, std::nullopt};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(state, state_kind());

}  // namespace nanchaos::inject
