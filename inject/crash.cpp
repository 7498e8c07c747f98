// Fault kind `crash`: the rank process dies abruptly (SIGKILL, or exit with `exit_code`).
//
#include <signal.h>
#include <unistd.h>

#include <optional>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/key_builder.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

// The rank dies abruptly at the start of the step: SIGKILL by default (as the OOM killer or a
// lost node would), or a plain exit with `exit_code` (a process that called exit()).
class CrashInjector final : public Injector {
 public:
  explicit CrashInjector(const harness::FaultSpec& f) : Injector(f) {
    if (f.params.has("exit_code")) exit_code_ = int(f.params.get_int("exit_code"));
  }
  void on_step_start(FaultContext& ctx) override {
    if (!armed(ctx)) return;
    ctx.fired(spec_.index, "process",
              {{"how", exit_code_ ? "exit " + std::to_string(*exit_code_) : "SIGKILL"}});
    if (exit_code_) _exit(*exit_code_);
    ::raise(SIGKILL);
  }

 private:
  std::optional<int> exit_code_;
};

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo crash_kind() {
  FaultKindInfo info;
  info.name = "crash";
  info.doc = "the rank process dies abruptly";
  info.keys = {
      Key("exit_code", KeyType::kInt, "exit with this status instead of being killed by SIGKILL")
          .range(0, 255),
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario&) -> std::unique_ptr<Injector> {
    return std::make_unique<CrashInjector>(f);
  };
  // A dead rank ends the job: one rank per campaign fault, in a launch of its own; a crashed job
  // is what it explains.
  info.stops_job = true;
  // The rank dies right after the `inject` record: that record dates the launch's failure.
  info.fails_at_injection = true;
  info.python_agent = true;
  info.refusal = [](const harness::Scenario& s, const harness::CampaignTargets&,
                    bool) -> std::string {
    return s.job.ranks < 2 ? "needs [job].ranks >= 2 (a lone rank has no peer to notice it)" : "";
  };
  info.draw = [](harness::FaultDraw&, nlohmann::ordered_json&) {};  // killed by SIGKILL
  info.truth = [](const nlohmann::ordered_json&) {
    return harness::KindTruth{harness::Cause::kRankFailure, std::nullopt};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(crash, crash_kind());

}  // namespace nanchaos::inject
