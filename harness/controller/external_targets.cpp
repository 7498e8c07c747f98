// One dry run of an external job for its names (see external_targets.h).
#include "harness/controller/external_targets.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include "harness/controller/judge.h"
#include "harness/evidence/event_paths.h"
#include "harness/evidence/event_types.h"
#include "harness/evidence/events.h"

namespace nanchaos::harness {

ExternalTargets external_targets(const Scenario& base, const LaunchContext& ctx) {
  namespace fs = std::filesystem;
  ExternalTargets out;
  Scenario s = base;
  s.faults.clear();
  char tmpl[] = "/tmp/nanchaos-targets-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    out.error = "cannot create a run folder in /tmp";
    return out;
  }
  const std::string run_dir = tmpl;
  const std::string job_id = fmt::format("{}-targets-{}", getpid(), now_us());
  JobResult job = run_external_job(ctx.launcher, s, ctx.self_exe, run_dir, ctx.python, job_id,
                                   std::nullopt, true);
  for (int64_t r = 0; r < s.job.ranks; ++r) {
    trim_event_log(event_log_path(run_dir, r));
  }
  std::set<std::string> seen;
  bool started = false;
  for (const auto& e : read_events(event_log_path(run_dir, 0))) {
    const std::string ev = event_type(e);
    if (ev == StartEvent::kEv && !started) {
      started = true;
      StartEvent start;
      try {
        start = parse_start(e);
      } catch (const nlohmann::json::exception& x) {
        out.error = fmt::format("{}: rank 0's `start` event is malformed: {} (run folder {})",
                                s.file, x.what(), run_dir);
        return out;
      }
      for (const auto& m : start.modules) {
        if (seen.insert(m).second) out.modules.push_back(m);
      }
      out.parameters = start.parameters;
    } else if (ev == "probe") {
      const auto n = e.find("name");
      const std::string name = n != e.end() && n->is_string() ? n->get<std::string>() : "";
      if (!name.empty() && seen.insert(name).second) out.modules.push_back(name);
    }
  }
  if (!started) {
    auto res = judge_run(s, run_dir, job);
    out.error =
        fmt::format("{}: the job's dry run never attached: {} (run folder {})", s.file,
                    res.reason.empty() ? "no `start` event from rank 0" : res.reason, run_dir);
    return out;
  }
  // The agent ends a dry run at the start of iteration 1 (`dry_run_done`): a rank without it
  // died or hung inside iteration 0, so modules its forward did not reach are missing.
  for (int64_t r = 0; r < s.job.ranks; ++r) {
    bool done = false;
    for (const auto& e : read_events(event_log_path(run_dir, r)))
      done |= event_type(e) == "dry_run_done";
    if (done) continue;
    auto res = judge_run(s, run_dir, job);
    out.error = fmt::format(
        "{}: the job's dry run attached but rank {} never finished iteration 0 ({}), so the "
        "names may be incomplete (run folder {})",
        s.file, r, res.reason.empty() ? fmt::format("exit code {}", job.exit_code) : res.reason,
        run_dir);
    return out;
  }
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  return out;
}

}  // namespace nanchaos::harness
