// What the judge says about an external job that never got going (docs/scenario-format.md
// "External jobs"), and about a target that matched nothing in the model the agent found.
#include <fmt/format.h>

#include "harness/controller/job_result.h"
#include "harness/controller/judge_internal.h"
#include "harness/scenario/keys.h"
#include "harness/scenario/scenario_schema.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;

}  // namespace

// The first reason that applies, from the most specific (the agent said why it could not attach)
// to the most generic (it loaded but no model appeared); the launcher's status and the last line
// of ranks.log go with the reasons the agent did not write itself.
std::string external_setup_error(const std::vector<RankEvidence>& logs, const JobResult& job,
                                 const std::string& tail) {
  const std::string exited = fmt::format("; launcher exit status {}", job.exit_code) +
                             (tail.empty() ? "" : "; last line of ranks.log: " + tail);
  for (size_t r = 0; r < logs.size(); ++r) {
    if (logs[r].attach_error) return fmt::format("rank {}: {}", r, *logs[r].attach_error);
  }
  if (!job.attach_failure.empty()) return job.attach_failure + exited;
  for (size_t r = 0; r < logs.size(); ++r) {
    if (!logs[r].agent) {
      return agent_never_loaded(int64_t(r)) + exited;
    }
  }
  for (size_t r = 0; r < logs.size(); ++r) {
    if (!logs[r].started && logs[r].exception) {
      return fmt::format("rank {}: the job raised before the agent attached to a model: {}", r,
                         *logs[r].exception);
    }
  }
  for (size_t r = 0; r < logs.size(); ++r) {
    if (!logs[r].started && logs[r].agent_kind == "cpp") {
      return fmt::format(
                 "rank {}: the program constructed nanchaos::Agent but never called "
                 "attach(model, &optimizer)",
                 r) +
             exited;
    }
    if (!logs[r].started) {
      return fmt::format(
                 "rank {}: the agent loaded but never attached to a model (no "
                 "DistributedDataParallel and no optimizer created)",
                 r) +
             exited;
    }
  }
  return "";
}

// For an external job rank 0's `start` lists the model's modules and parameters: a target none
// of them matches gets the nearest name (the DDP `module.` prefix is the classic slip); otherwise
// the generic advice.
std::string target_hint(const FaultSpec& fault, const StartEvent* start) {
  const std::string generic = "check the name with `nanchaos targets`";
  if (!start || !fault.target || fault.target->where == TargetWhere::kLoss) return generic;
  const std::string where = to_string(fault.target->where);
  const std::string& pattern = fault.target->pattern;
  const bool module = fault.target->where == TargetWhere::kActivation;
  const std::vector<std::string>& names = module ? start->modules : start->parameters;
  if (names.empty()) return generic;
  for (const auto& n : names) {
    if (match_target(pattern, n)) return generic;  // it matched: the module never ran in training
  }
  const std::string near = nearest(pattern, names);
  return fmt::format("it matches no {} of the model{}; `nanchaos targets` lists them",
                     module ? "module (nor a probe that ran)" : "parameter",
                     near.empty() ? "" : fmt::format(" (did you mean {}:{}?)", where, near));
}

}  // namespace nanchaos::harness
