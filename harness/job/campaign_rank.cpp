// The in-launch campaign of a built-in job (runner.h run_campaign_on; docs/architecture.md
// "Campaigns"): the clean prefix is trained once; each fault starts from an in-memory checkpoint
// of the whole rank at its step, runs its window into its own folder, and the rank restores.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "harness/comm/in_process.h"  // WorldAborted
#include "harness/evidence/event_paths.h"
#include "harness/job/rank_runner.h"
#include "harness/job/runner.h"

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

// The first step any of the scenario's faults can fire at (the checkpoint's step).
int64_t first_fault_step(const Scenario& s) {
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const auto& f : s.faults) first = std::min(first, f.step);
  return first;
}

}  // namespace

std::vector<InLaunchFault> load_inlaunch_faults(const std::string& campaign_file) {
  std::ifstream in(campaign_file);
  if (!in) throw std::runtime_error("cannot read campaign file " + campaign_file);
  std::vector<InLaunchFault> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    out.push_back({load_scenario(line), fs::path(line).parent_path().string()});
  }
  return out;
}

RankRunner::Checkpoint RankRunner::checkpoint(int64_t step) {
  Checkpoint cp;
  cp.model = std::make_unique<detect::Snapshot>(step, model_state());
  cp.stack = stack_->checkpoint();
  cp.high_water = high_water_;
  return cp;
}

void RankRunner::restore(const Checkpoint& cp) {
  cp.model->restore(model_state());
  stack_->restore(cp.stack);
  high_water_ = cp.high_water;
  zero_grads();
}

/// One fault's window from `step` (where the rank stands, checkpointed by the caller) to
/// [job].steps, into `f.dir/events/rank-R.jsonl`, which starts as a copy of the launch's log
/// (its `start` record and the clean prefix): the evidence the fault's scenario run alone
/// writes, but for timings and pids.
void RankRunner::run_fault_window(const InLaunchFault& f, int64_t step) {
  fs::create_directories(events_dir(f.dir));
  EventLog other(event_log_path(f.dir, rank_));
  const std::string prefix = log_->text();
  for (size_t a = 0, b; a < prefix.size(); a = b + 1) {
    b = prefix.find('\n', a);
    if (b == std::string::npos) b = prefix.size();
    if (b > a) other.write_line(std::string_view(prefix).substr(a, b - a));
  }
  log_->swap(other);  // every holder of *log_ (agent, stack, collectives) writes there now
  install_faults(f.s);
  if (auto stop = train(step, s_.job.steps)) {
    finish_abort(step, stop->reason, stop->cause);
  } else {
    finish();
  }
  log_->swap(other);
}

int RankRunner::run_campaign(const std::vector<InLaunchFault>& faults) {
  std::vector<const InLaunchFault*> order;
  for (const auto& f : faults) order.push_back(&f);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return first_fault_step(a->s) < first_fault_step(b->s);
  });
  initial_eval_ = eval_loss(*workload_, device_);
  int64_t step = 0;
  for (const InLaunchFault* f : order) {
    const int64_t at = std::min(first_fault_step(f->s), s_.job.steps);
    if (auto stop = train(step, at)) return finish_abort(step, stop->reason, stop->cause);
    const Checkpoint cp = checkpoint(step);
    run_fault_window(*f, step);
    restore(cp);
    install_faults(s_);
  }
  if (auto stop = train(step, s_.job.steps)) return finish_abort(step, stop->reason, stop->cause);
  return finish();
}

int run_campaign_on(Scenario s, std::vector<InLaunchFault> faults,
                    std::unique_ptr<Communicator> comm, const std::string& run_dir) {
  s.faults.clear();
  try {
    RankRunner runner(std::move(s), std::move(comm), run_dir);
    return runner.run_campaign(faults);
  } catch (const WorldAborted& e) {
    return e.exit_code;  // MPI_Abort's part: this rank ends where it stood
  }
}

}  // namespace nanchaos::harness
