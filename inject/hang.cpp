// Fault kind `hang`: the rank stops making progress, as a stuck GPU or a rank waiting on the
// wrong collective.
#include <chrono>
#include <thread>

#include "harness/registry.h"
#include "harness/scenario.h"
#include "harness/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

// Stalls the rank's thread. "forever" stalls until the job is torn down (by a peer's watchdog,
// the launcher or the controller's timeout).
class HangInjector final : public Injector {
 public:
  explicit HangInjector(const harness::FaultSpec& f)
      : Injector(f),
        duration_ms_(f.params.get_int("duration_ms")),
        at_step_start_(f.params.get_string("where") == "step_start") {}

  void on_step_start(FaultContext& ctx) override {
    if (at_step_start_) stall(ctx, "step_start");
  }
  void on_before_collective(FaultContext& ctx, const std::string& name) override {
    if (!at_step_start_ && name == "grad_allreduce") stall(ctx, "before_grad_allreduce");
  }

 private:
  void stall(FaultContext& ctx, const char* where) {
    if (!armed(ctx)) return;
    ctx.fired(spec_.index, where,
              {{"duration_ms",
                duration_ms_ < 0 ? nlohmann::json("forever") : nlohmann::json(duration_ms_)}});
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms_);
    while (duration_ms_ < 0 || std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  int64_t duration_ms_;  // -1 = forever
  bool at_step_start_;
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
      Key("where", KeyType::kString, "where in the step the rank stalls")
          .def("before_grad_allreduce")
          .choices({"step_start", "before_grad_allreduce"}),
  };
  info.not_implemented = "";
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<HangInjector>(f);
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(hang, hang_kind());

}  // namespace nanchaos::inject
