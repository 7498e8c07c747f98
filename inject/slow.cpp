// Fault kind `slow`: the rank becomes a straggler (a throttled GPU, a slow data loader on one
// node, a degraded link) without any numerical fault. Keys and ground truth:
// SCENARIO_FORMAT.md "Slow ranks and finite silent data corruption". The Python agent's twin is
// inject/python/nanchaos/faults/slow.py.
//
// `where` picks the phase that grows on the built-in job (harness/job/runner.cpp):
//   data     - at the batch fetch (Injector::on_batch)
//   compute  - after the forward, once the loss is computed (on_loss)
//   backward - inside the backward: a gradient hook on the first module's output runs when the
//              backward reaches that module, after every later layer's gradients exist
//   comm     - just before the rank enters the gradient all-reduce (on_before_collective)
// The delay is a sleep of the rank's thread: the peers wait for it in the next collective, so a
// straggler is seen in their collective waits too, and a detector must subtract those.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <thread>

#include "harness/common/rng.h"
#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

enum class Phase { kData, kCompute, kBackward, kComm };

Phase parse_phase(const std::string& w) {
  if (w == "data") return Phase::kData;
  if (w == "compute") return Phase::kCompute;
  if (w == "backward") return Phase::kBackward;
  return Phase::kComm;
}

class SlowInjector final : public Injector {
 public:
  explicit SlowInjector(const harness::FaultSpec& f)
      : Injector(f),
        steps_(f.params.get_int("steps")),
        delay_ms_(f.params.get_int("delay_ms")),
        fraction_(f.params.get_float("fraction")),
        where_(f.params.get_string("where")),
        phase_(parse_phase(where_)) {}

  void on_batch(FaultContext& ctx, harness::Batch&) override {
    if (phase_ == Phase::kData) delay(ctx);
  }
  torch::Tensor on_loss(FaultContext& ctx, torch::Tensor loss) override {
    if (phase_ == Phase::kCompute) delay(ctx);
    return loss;
  }
  torch::Tensor on_activation(FaultContext& ctx, const std::string&, torch::Tensor out) override {
    // The first module of the step: its gradient is among the last the backward computes.
    if (phase_ != Phase::kBackward || hooked_step_ == ctx.step || !out.requires_grad()) return out;
    hooked_step_ = ctx.step;
    if (!slowed(ctx)) return out;
    const int64_t delay_ms = delay_ms_;
    const int index = spec_.index;
    auto fired = ctx.fired;
    out.register_hook([delay_ms, index, fired](const torch::Tensor& grad) {
      fired(index, "backward", {{"delay_ms", delay_ms}});
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      return grad;
    });
    return out;
  }
  void on_before_collective(FaultContext& ctx, const std::string& name) override {
    if (phase_ == Phase::kComm && name == "grad_allreduce") delay(ctx);
  }

 private:
  // In [step, step + steps) (steps = 0: to the end), on a hit rank, and on a `fraction` share of
  // those steps drawn from (seed, fault, step): every slowed rank is slow on the same steps, as
  // ranks behind one throttled node or link are.
  bool slowed(const FaultContext& ctx) const {
    if (ctx.step < spec_.step || (steps_ > 0 && ctx.step >= spec_.step + steps_)) return false;
    if (!spec_.ranks.contains(ctx.rank)) return false;
    if (ctx.reexecution && !spec_.persistent) return false;
    return fires(ctx.seed, spec_.index, ctx.step, 0, fraction_);
  }
  void delay(FaultContext& ctx) {
    if (!slowed(ctx)) return;
    ctx.fired(spec_.index, where_, {{"delay_ms", delay_ms_}});
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
  }

  int64_t steps_;  // 0 = to the end
  int64_t delay_ms_;
  double fraction_;
  std::string where_;
  Phase phase_;
  int64_t hooked_step_ = -1;
};

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo slow_kind() {
  FaultKindInfo info;
  info.name = "slow";
  info.doc = "the rank becomes a straggler: a phase of its steps takes delay_ms longer";
  info.keys = {
      Key("steps", KeyType::kInt, "how many steps from `step` are slowed (0 = to the end)")
          .def(1)
          .min(0),
      Key("delay_ms", KeyType::kInt, "time added to each slowed step's phase, ms")
          .required()
          .min(1)
          .max(3600000),
      Key("where", KeyType::kString,
          "the phase that grows: data (batch fetch), compute (after the forward), backward "
          "(inside the backward), comm (before the gradient all-reduce)")
          .def("compute")
          .choices({"compute", "backward", "data", "comm"}),
      Key("fraction", KeyType::kFloat,
          "share of the steps in range that are slowed, drawn from the seed (1 = persistent)")
          .def(1.0)
          .above(0)
          .max(1),
  };
  info.check = [](const harness::FaultSpec& f) {
    // The common keys are not in f.params: their defaults (1) are what an unused key reads.
    if (f.repeat != 1) {
      harness::scenario_error(f.pos,
                              harness::fault_label(f) +
                                  ".repeat: a `slow` fault counts its steps with `steps` (0 = to "
                                  "the end); `repeat` is not read for it");
    }
    if (f.probability != 1.0) {
      harness::scenario_error(f.pos, harness::fault_label(f) +
                                         ".probability: a `slow` fault draws its slowed steps with "
                                         "`fraction`; `probability` is not read for it");
    }
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<SlowInjector>(f);
  };
  info.python_agent = true;
  // Drawn when --kinds names it: a default campaign's draws (and the baselines scored on them)
  // stay as they were before the `straggler` detector (in `default`) could see a slow rank.
  // Campaign rows say `slows`; the straggler's detections on the other rows are false positives.
  info.slows_rank = true;
  info.refusal = [](const harness::Scenario&, const harness::CampaignTargets&,
                    bool requested) -> std::string {
    return requested ? ""
                     : "drawn only when --kinds names it (a straggler, no numerical fault; the "
                       "straggler detector scores it)";
  };
  // Campaigns: a straggler for a few steps, in each phase; it changes no number, so a detection
  // by a numerical detector on it is a false positive.
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    static const std::vector<std::string> phases = {"compute", "backward", "data", "comm"};
    f["where"] = d.pick(phases);
    f["steps"] = 5;
    f["delay_ms"] = 100;
  };
  info.fault_class = [](const nlohmann::ordered_json& f) {
    return f.value("where", std::string("compute"));
  };
  info.truth = [](const nlohmann::ordered_json& f) {
    return harness::KindTruth{harness::Cause::kStraggler, f.value("where", std::string("compute"))};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(slow, slow_kind());

}  // namespace nanchaos::inject
