// Fault kind `hang`: the rank stops making progress, as a stuck GPU or a rank waiting on the
// wrong collective. where = "before_reduce_scatter" is the Python agent's (FSDP2 jobs,
// inject/python/nanchaos/faults/hang.py): refused at load for built-in jobs.
#include <chrono>
#include <stdexcept>
#include <thread>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

// Stalls the rank's thread (stall = "host"). "forever" stalls until the job is torn down (by a
// peer's watchdog, the launcher or the controller's timeout). stall = "device" (device = "cuda")
// instead enqueues a spinning kernel on the collective stream before the gradient all-reduce:
// the host goes on, the all-reduce never completes, and the rank's own watchdog must end it
// with ncclCommAbort (the one-rank NCCL hang: a single-rank all-reduce waits for no peer).
class HangInjector final : public Injector {
 public:
  explicit HangInjector(const harness::FaultSpec& f)
      : Injector(f),
        duration_ms_(f.params.get_int("duration_ms")),
        at_step_start_(f.params.get_string("where") == "step_start"),
        on_device_(f.params.get_string("stall") == "device") {}

  void on_step_start(FaultContext& ctx) override {
    if (at_step_start_) stall(ctx, "step_start");
  }
  void on_before_collective(FaultContext& ctx, const std::string& name) override {
    if (at_step_start_ || name != "grad_allreduce") return;
    if (on_device_) {
      if (!armed(ctx)) return;
      if (!ctx.stall_device || !ctx.stall_device(duration_ms_)) {
        throw std::runtime_error("fault hang: stall = \"device\" needs the NCCL engine");
      }
      ctx.fired(spec_.index, "device:before_grad_allreduce", {{"duration_ms", json_duration()}});
      return;
    }
    stall(ctx, "before_grad_allreduce");
  }

 private:
  void stall(FaultContext& ctx, const char* where) {
    if (!armed(ctx)) return;
    ctx.fired(spec_.index, where, {{"duration_ms", json_duration()}});
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms_);
    while (duration_ms_ < 0 || std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  nlohmann::json json_duration() const {
    return duration_ms_ < 0 ? nlohmann::json("forever") : nlohmann::json(duration_ms_);
  }
  int64_t duration_ms_;  // -1 = forever
  bool at_step_start_;
  bool on_device_;
};

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo hang_kind() {
  FaultKindInfo info;
  info.name = "hang";
  info.doc = "the rank stops making progress for a while or forever";
  info.keys = {
      Key("duration_ms", KeyType::kIntOrForever, "how long the rank stalls").required().min(1),
      Key("where", KeyType::kString,
          "where in the step the rank stalls (before_reduce_scatter: before FSDP2's first "
          "reduce-scatter of the iteration, FSDP2 external jobs only)")
          .def("before_grad_allreduce")
          .choices({"step_start", "before_grad_allreduce", "before_reduce_scatter"}),
      Key("stall", KeyType::kString,
          "host: the rank's thread sleeps; device: a kernel spins on the collective stream "
          "before the gradient all-reduce (device = \"cuda\", where = \"before_grad_allreduce\")")
          .def("host")
          .choices({"host", "device"}),
  };
  info.check_job = [](const harness::FaultSpec& f, const harness::Scenario& s) {
    if (f.params.get_string("where") == "before_reduce_scatter" && !s.job.external()) {
      harness::scenario_error(f.params.pos("where"),
                              harness::fault_label(f) +
                                  ".where: \"before_reduce_scatter\" is not implemented for "
                                  "built-in jobs: FSDP2 external jobs only (the built-in stack "
                                  "all-reduces its gradients; use \"before_grad_allreduce\")");
    }
    if (!f.params.given("stall") || f.params.get_string("stall") != "device") return;
    if (s.job.backend != harness::Backend::kNccl) {
      harness::scenario_error(
          f.params.pos("stall"),
          harness::fault_label(f) +
              ".stall: \"device\" needs device = \"cuda\" with the nccl backend");
    }
    if (f.params.get_string("where") != "before_grad_allreduce") {
      harness::scenario_error(f.params.pos("stall"),
                              harness::fault_label(f) +
                                  ".stall: \"device\" stalls the gradient all-reduce; it needs "
                                  "where = \"before_grad_allreduce\"");
    }
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<HangInjector>(f);
  };
  // A stalled rank holds its peers in the collective: one rank per campaign fault, in a launch of
  // its own; a hung job is what it explains.
  info.stops_job = true;
  info.python_agent = true;
  info.python_only = [](const harness::FaultSpec& f) -> std::string {
    if (!f.params.has("where") || f.params.get_string("where") != "before_reduce_scatter") {
      return "";
    }
    return "where = \"before_reduce_scatter\" (FSDP2's reduce-scatter)";
  };
  info.refusal = [](const harness::Scenario& s, const harness::CampaignTargets&,
                    bool) -> std::string {
    return s.job.ranks < 2 ? "needs [job].ranks >= 2 (a lone rank has no peer to notice it)" : "";
  };
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    f["duration_ms"] = "forever";
    f["where"] = d.below(2) == 0 ? "step_start" : "before_grad_allreduce";
  };
  info.truth = [](const nlohmann::ordered_json&) {
    return harness::KindTruth{harness::Cause::kHang, std::nullopt};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(hang, hang_kind());

}  // namespace nanchaos::inject
