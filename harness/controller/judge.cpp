// Judging a job from evidence only: the per-rank event logs and how the processes ended.
//
// judge_evidence() takes every rank's evidence (rank_evidence.h, read once by
// read_job_evidence), runs the post-mortem and the detections (judge_internal.h), and decides
// here what needs all of them: the outcome, the injections, the end state, the blame, the
// [expect] checks and the verdict. Nothing here opens a file.
#include "harness/controller/judge.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "harness/common/cause.h"
#include "harness/controller/judge_internal.h"
#include "harness/controller/rank_evidence.h"
#include "harness/controller/timeline.h"
#include "harness/scenario/registry.h"

namespace nanchaos::harness {
namespace {

using nlohmann::json;
using results::Check;
using results::FaultOutcome;
using results::Outcome;

// What the ranks of a job that crashed or hung said last, for a failed `outcome` check: the first
// uncaught exception (external jobs), the ranks that ended with no exit record, how the launcher
// ended.
std::string last_words(const std::vector<RankEvidence>& logs, const JobResult& job) {
  std::vector<std::string> said;
  for (size_t r = 0; r < logs.size(); ++r) {
    if (logs[r].exception) said.push_back(fmt::format("rank {} raised {}", r, *logs[r].exception));
  }
  std::vector<size_t> silent, unfinished;
  for (size_t r = 0; r < logs.size(); ++r) {
    if (logs[r].started && !logs[r].exit_code && !logs[r].abort) silent.push_back(r);
    if (logs[r].exit_code && *logs[r].exit_code == 0 && !logs[r].final && !logs[r].abort) {
      unfinished.push_back(r);
    }
  }
  if (!silent.empty()) {
    said.push_back(fmt::format("rank(s) {} ended with no exit record", fmt::join(silent, ", ")));
  }
  if (!unfinished.empty()) {
    // Exit code 0 with no end state: nothing crashed, the program skipped its last call.
    said.push_back(fmt::format(
        "rank(s) {} exited 0 without a `final` record (a LibTorch program that never called "
        "Agent::finish(), or a Python job whose agent's exit hook did not run), so its end "
        "state is unknown",
        fmt::join(unfinished, ", ")));
  }
  if (job.timed_out) {
    said.push_back("the harness killed the job at [job].timeout_ms");
  } else if (job.exit_code > 128) {
    said.push_back(fmt::format("launcher exit status {} (signal {}: {})", job.exit_code,
                               job.exit_code - 128, strsignal(job.exit_code - 128)));
  } else {
    said.push_back(fmt::format("launcher exit status {}", job.exit_code));
  }
  return fmt::format("{}", fmt::join(said, "; "));
}

json ranks_json(const std::vector<int64_t>& r) {
  if (r.empty()) return nullptr;
  if (r.size() == 1) return r[0];
  return r;
}

// The `final` events' loss scales agree: both none (absent or null) or the same number.
bool same_loss_scale(const std::optional<double>& a, const std::optional<double>& b) {
  const bool none_a = !a || std::isnan(*a), none_b = !b || std::isnan(*b);
  if (none_a || none_b) return none_a == none_b;
  return *a == *b;
}

// How the job ended: killed at its timeout, every rank through to its final record, aborted by a
// rank, else crashed.
Outcome job_outcome(const std::vector<RankEvidence>& logs, const JobResult& job) {
  bool all_final = true, any_abort = false, all_exit0 = true;
  for (const auto& l : logs) {
    all_final = all_final && l.final.has_value();
    any_abort = any_abort || l.abort.has_value();
    all_exit0 = all_exit0 && l.exit_code && *l.exit_code == 0;
  }
  if (job.timed_out) return Outcome::kHung;
  if (all_final && all_exit0 && !any_abort && job.exit_code == 0) return Outcome::kCompleted;
  if (any_abort) return Outcome::kAborted;
  return Outcome::kCrashed;
}

// The injections of every rank into `res.injections` (by time), and what the rest of the judge
// needs of them.
struct Fired {
  std::optional<int64_t> first_fault_step;
  std::optional<int64_t> first_inject_t;
  std::set<int> faults;  // [[fault]] indices that fired at least once
};

// `t0_us`: the timeline's zero (the first launch's start).
Fired collect_injections(const std::vector<RankEvidence>& logs, int64_t t0_us,
                         results::ScenarioResult& res) {
  const double t0 = double(t0_us);
  Fired f;
  for (size_t r = 0; r < logs.size(); ++r) {
    for (const auto& e : logs[r].injections) {
      results::Injection inj;
      inj.fault = e.fault;
      inj.kind = e.kind;
      inj.rank = int64_t(r);
      inj.step = e.step;
      inj.target = e.target;
      inj.t_ms = (double(e.t_us) - t0) / 1000.0;
      inj.replay = e.replay;
      f.faults.insert(inj.fault);
      if (!f.first_fault_step || inj.step < *f.first_fault_step) f.first_fault_step = inj.step;
      if (!f.first_inject_t || e.t_us < *f.first_inject_t) f.first_inject_t = e.t_us;
      res.injections.push_back(inj);
    }
  }
  std::sort(res.injections.begin(), res.injections.end(),
            [](const auto& a, const auto& b) { return a.t_ms < b.t_ms; });
  return f;
}

// What the judge decided before the [expect] checks, which compare it with what was expected.
struct Judged {
  bool detected = false;
  bool deadlock = false;
  bool recovered = false;
  bool diverged = false;  // the final loss is above 1.5x the initial one
  std::optional<bool> consistent;
  std::vector<int64_t> blamed;  // the stack's first detection, else the post-mortem
  std::string blamed_cause;
  double abort_ms = -1;  // first injection -> the job's end (-1: no injection)
  int64_t false_positives = 0;
  int64_t restarts = 0;                      // relaunches ([job] restarts) that happened
  std::optional<int64_t> resumed_from_step;  // of the last launch
  std::optional<int64_t> steps_lost = 0;     // summed over restarts (null: a launch ran no step)
  std::optional<double> resume_ms_max;  // the slowest restart (null: none, or one never resumed)
  nlohmann::json matches_clean;         // true/false, or why it cannot be compared (a string)
};

// [expect] final_matches_clean: every rank's final (params_hash, optim_hash) equals the clean
// run's of the same rank; else why nothing can be compared.
json final_matches_clean(const std::vector<RankEvidence>& logs,
                         const std::optional<CleanReference>& clean) {
  if (!clean) return "no clean run (RUN/clean/clean.json)";
  if (!clean->error.empty()) return clean->error;
  if (clean->ranks.size() != logs.size()) {
    return fmt::format("the clean run has {} rank(s), this job {}", clean->ranks.size(),
                       logs.size());
  }
  std::vector<size_t> without, differ;
  for (size_t r = 0; r < logs.size(); ++r) {
    const auto& f = logs[r].final;
    if (!f || f->params_hash.empty()) {
      without.push_back(r);
    } else if (f->params_hash != clean->ranks[r]->first ||
               f->optim_hash != clean->ranks[r]->second) {
      differ.push_back(r);
    }
  }
  if (!without.empty()) {
    return fmt::format("rank(s) {} ended with no final digests", fmt::join(without, ", "));
  }
  return differ.empty();
}

// The [expect] checks, in the order report.json lists them.
void add_checks(const Scenario& s, const std::vector<RankEvidence>& logs, const JobResult& job,
                const Judged& j, results::ScenarioResult& res) {
  const auto& ex = s.expect;
  auto add = [&](const std::string& key, json expected, json actual, bool pass) {
    res.checks.push_back(Check{key, std::move(expected), std::move(actual), pass});
  };
  const auto& fd = res.first_detection;
  if (ex.detected) add("detected", *ex.detected, j.detected, j.detected == *ex.detected);
  if (ex.first_detector) {
    add("first_detector", *ex.first_detector, fd ? json(fd->detector) : json(nullptr),
        fd && fd->detector == *ex.first_detector);
  }
  if (ex.within_steps) {
    add("within_steps", *ex.within_steps, fd ? json(*fd->latency_steps) : json(nullptr),
        fd && *fd->latency_steps <= *ex.within_steps);
  }
  if (ex.within_ms) {
    const bool have = fd && fd->latency_ms;
    add("within_ms", *ex.within_ms, have ? json(*fd->latency_ms) : json(nullptr),
        have && *fd->latency_ms <= *ex.within_ms);
  }
  if (ex.rank) {
    auto want = *ex.rank;
    std::sort(want.begin(), want.end());
    auto got = j.blamed;
    std::sort(got.begin(), got.end());
    add("rank", ranks_json(want), ranks_json(got), !got.empty() && want == got);
  }
  if (ex.layer) {
    const std::string got = fd ? fd->layer : "";
    add("layer", *ex.layer, fd ? json(got) : json(nullptr),
        fd && !got.empty() && got.rfind(*ex.layer, 0) == 0);
  }
  if (ex.cause) {
    add("cause", *ex.cause, j.blamed_cause.empty() ? json(nullptr) : json(j.blamed_cause),
        j.blamed_cause == *ex.cause);
  }
  if (ex.transient) {
    const bool have = fd && fd->transient;
    add("transient", *ex.transient, have ? json(*fd->transient) : json(nullptr),
        have && *fd->transient == *ex.transient);
  }
  if (ex.outcome) {
    add("outcome", *ex.outcome, to_string(res.outcome), to_string(res.outcome) == *ex.outcome);
  } else if (res.outcome == Outcome::kCrashed || res.outcome == Outcome::kHung) {
    // No unexplained crash passes: a job that crashed or had to be killed, with no fault of a
    // kind that stops the job (crash, hang) that fired to explain it, fails `outcome` even when
    // [expect] did not ask (a rank killed from outside, a std::bad_alloc, a stack that raised).
    // Say what the ranks said.
    bool explained = false;
    for (const auto& inj : res.injections) {
      const FaultKindInfo* info = find_fault_kind(inj.kind);
      explained |= info != nullptr && info->stops_job;
    }
    if (!explained) {
      add("outcome", "completed (no crash or hang fault explains another outcome)",
          std::string(to_string(res.outcome)) + ": " + last_words(logs, job), false);
    }
  }
  add("deadlock", ex.deadlock, j.deadlock, j.deadlock == ex.deadlock);
  if (ex.abort_within_ms) {
    // For a job that ended early: an abort, or a crash the launcher tore down.
    const bool ended_early = res.outcome == Outcome::kAborted || res.outcome == Outcome::kCrashed;
    const bool ok = ended_early && j.abort_ms >= 0 && j.abort_ms <= *ex.abort_within_ms;
    add("abort_within_ms", *ex.abort_within_ms, j.abort_ms >= 0 ? json(j.abort_ms) : json(nullptr),
        ok);
  }
  if (ex.recovered) add("recovered", *ex.recovered, j.recovered, j.recovered == *ex.recovered);
  if (ex.final_loss_max) {
    const bool have = res.final_loss && std::isfinite(*res.final_loss);
    add("final_loss_max", *ex.final_loss_max, have ? json(*res.final_loss) : json(nullptr),
        have && *res.final_loss <= *ex.final_loss_max);
  }
  if (ex.consistent || res.outcome == Outcome::kCompleted) {
    const bool want = ex.consistent.value_or(true);
    add("consistent", want, j.consistent ? json(*j.consistent) : json(nullptr),
        j.consistent && *j.consistent == want);
  }
  if (ex.fault_outcome) {
    add("fault_outcome", *ex.fault_outcome, to_string(res.fault_outcome),
        to_string(res.fault_outcome) == *ex.fault_outcome);
  }
  add("max_false_positives", ex.max_false_positives, j.false_positives,
      j.false_positives <= ex.max_false_positives);
  if (ex.restarts) add("restarts", *ex.restarts, j.restarts, j.restarts == *ex.restarts);
  if (ex.resumed_from_step) {
    add("resumed_from_step", *ex.resumed_from_step,
        j.resumed_from_step ? json(*j.resumed_from_step) : json(nullptr),
        j.resumed_from_step == ex.resumed_from_step);
  }
  if (ex.steps_lost_max) {
    add("steps_lost_max", *ex.steps_lost_max, j.steps_lost ? json(*j.steps_lost) : json(nullptr),
        j.steps_lost && *j.steps_lost <= *ex.steps_lost_max);
  }
  if (ex.final_matches_clean) {
    add("final_matches_clean", *ex.final_matches_clean, j.matches_clean,
        j.matches_clean.is_boolean() && j.matches_clean.get<bool>() == *ex.final_matches_clean);
  }
  if (ex.resume_ms_max) {
    // Like within_ms with no detection: a bound on a restart that never happened (or never
    // resumed) fails, with actual null.
    add("resume_ms_max", *ex.resume_ms_max,
        j.resume_ms_max ? json(*j.resume_ms_max) : json(nullptr),
        j.resume_ms_max && *j.resume_ms_max <= *ex.resume_ms_max);
  }
}

// An external job whose agent counted a different number of iterations than [job].steps, in a
// ratio that gradient accumulation explains: the step clock makes one iteration of every
// `micro_batches` training forwards (docs/external-jobs.md), so a job that accumulates over k
// micro-batches with micro_batches = 1 counts k x steps iterations (80 for 20 with k = 4, and
// `recovered` and the fault steps then mean nothing). `counted` is the iterations every rank
// finished. Empty when the counts agree or no accumulation factor explains them.
std::string step_count_note(const Scenario& s, int64_t counted) {
  const int64_t steps = s.job.steps, micro = s.job.micro_batches;
  if (!s.job.external() || steps <= 0 || counted <= 0 || counted == steps) return "";
  const std::string with =
      micro > 1 ? fmt::format(" with micro_batches = {}", micro) : std::string();
  const int64_t forwards = counted * micro;  // training forwards the agent counted
  if (forwards % steps != 0) return "";
  const int64_t want = forwards / steps;
  if (want == micro) return "";
  return fmt::format(
      "counted {} iterations for steps = {}{}: does the job accumulate over {} micro-batch{}? "
      "set micro_batches = {}",
      counted, steps, with, want, want == 1 ? "" : "es", want);
}

// The verdict: an error when the record is partial, a rank never started or a fault that had to
// fire did not; else pass or fail by the checks.
void decide_verdict(const Scenario& s, const JobEvidence& ev, const JobResult& job,
                    const std::set<int>& fired, results::ScenarioResult& res) {
  const std::vector<RankEvidence>& logs = ev.ranks;
  std::vector<std::string> unverified;
  int64_t most_steps = 0;
  for (const auto& l : logs) most_steps = std::max(most_steps, l.steps_done);
  for (const auto& f : s.faults) {
    if (!fired.count(f.index) && f.probability >= 1.0) {
      std::string what = fmt::format("[[fault]] #{} ({}, step {}", f.index + 1, f.kind, f.step);
      if (res.outcome == Outcome::kCompleted && most_steps <= f.step) {
        what +=
            fmt::format(": the job ran {} iteration(s), so step {} never came", most_steps, f.step);
      } else if (job.timed_out && most_steps <= f.step) {
        // A slow job killed at its deadline: the target's name is not the suspect.
        what += fmt::format(
            ": [job].timeout_ms ({} ms) expired after {} iteration(s), before step {} came",
            s.job.timeout_ms, most_steps, f.step);
      } else if (f.params.has("target")) {
        what += ", target " + f.params.get_string("target") + ": " +
                target_hint(f, logs.empty() || !logs[0].start ? nullptr : &*logs[0].start);
      }
      unverified.push_back(what + ")");
    }
  }
  bool setup_failed = false;
  for (const auto& l : logs) setup_failed = setup_failed || !l.started;
  const std::string lost = evidence_lost(ev, res.dropped_events);
  const std::string& err = ev.ranks_log_first_error;
  const std::string external_err =
      s.job.external() && setup_failed && res.outcome != Outcome::kCompleted
          ? external_setup_error(logs, job, ev.ranks_log_last_line)
          : "";
  int64_t fewest_steps = logs.empty() ? 0 : std::numeric_limits<int64_t>::max();
  for (const auto& l : logs) fewest_steps = std::min(fewest_steps, l.steps_done);
  std::optional<std::string> attach_error;
  for (size_t r = 0; r < logs.size() && !attach_error; ++r) {
    if (logs[r].attach_error) attach_error = fmt::format("rank {}: {}", r, *logs[r].attach_error);
  }
  if (!lost.empty()) {
    // Checks judged on a partial record mean nothing: neither pass nor fail.
    res.verdict = results::Verdict::kError;
    res.reason = lost;
  } else if (attach_error) {
    // The agent refused the job (after `start` too: a second model, a second agent).
    res.verdict = results::Verdict::kError;
    res.reason = *attach_error;
  } else if (setup_failed && res.outcome != Outcome::kCompleted) {
    res.verdict = results::Verdict::kError;
    if (!external_err.empty()) {
      res.reason = external_err;
    } else if (!err.empty()) {
      res.reason = err;
    } else if (job.timed_out) {
      res.reason = fmt::format("[job].timeout_ms ({} ms) expired before every rank started",
                               s.job.timeout_ms);
    } else {
      res.reason = "a rank never started; see " + ev.run_dir + "/ranks.log";
    }
  } else if (!unverified.empty()) {
    res.verdict = results::Verdict::kError;
    res.reason = "injection not verified: ";
    for (size_t i = 0; i < unverified.size(); ++i) {
      res.reason += (i ? ", " : "") + unverified[i] + " never fired";
    }
    // The C++ agent says when the program called it out of order (a step never begun).
    for (size_t r = 0; r < logs.size(); ++r) {
      if (logs[r].agent_warnings.empty()) continue;
      res.reason += fmt::format("; rank {}'s agent warned: {}", r, logs[r].agent_warnings[0]);
      break;
    }
  } else if (res.outcome == Outcome::kCompleted && fewest_steps < s.job.steps) {
    // A clean exit short of [job].steps without an abort ran less than the scenario asks:
    // no check on it means anything (a `detected = false` would pass on zero steps).
    res.verdict = results::Verdict::kError;
    const std::string note = step_count_note(s, fewest_steps);
    res.reason = fmt::format(
        "the job exited 0 after {} of the {} steps of [job].steps, with no abort: it did not run "
        "the scenario (a loop over fewer steps, or finish() called early){}",
        fewest_steps, s.job.steps, note.empty() ? "" : "; " + note);
  } else {
    // The accumulation diagnostic leads the reason: it explains the failed checks after it
    // (`recovered`, false positives at the wrong steps). On a pass it is the reason alone.
    std::string failed =
        res.outcome == Outcome::kCompleted ? step_count_note(s, fewest_steps) : std::string();
    bool any_failed = false;
    for (const auto& c : res.checks) {
      if (c.pass) continue;
      any_failed = true;
      failed += fmt::format("{}{}: expected {}, got {}", failed.empty() ? "" : "; ", c.key,
                            c.expected.dump(), c.actual.dump());
    }
    res.verdict = any_failed ? results::Verdict::kFail : results::Verdict::kPass;
    res.reason = failed;
  }
}

// The end state: steps every rank finished, the final loss, whether the ranks ended identical
// (digests, loss scale, per-step actions) and whether the job recovered; sets
// j.{consistent,recovered,detected,diverged}.
void judge_end_state(const Scenario& s, const std::vector<RankEvidence>& logs, Judged& j,
                     results::ScenarioResult& res) {
  bool all_final = true;
  for (const auto& l : logs) all_final = all_final && l.final.has_value();
  int64_t steps_completed = std::numeric_limits<int64_t>::max();
  for (const auto& l : logs) steps_completed = std::min(steps_completed, l.steps_done);
  res.steps_completed = logs.empty() ? 0 : steps_completed;
  bool eval_finite = all_final, params_finite = all_final;
  if (all_final) {
    // The loss is read off the ranks that compute one (`has_loss`: a pipeline stage before the
    // last computes none, docs/external-jobs.md "Pipeline parallelism"); digests off every rank.
    const auto with_loss = std::find_if(logs.begin(), logs.end(),
                                        [](const RankEvidence& l) { return l.final->has_loss; });
    const FinalEvent& f0 = with_loss != logs.end() ? *with_loss->final : *logs[0].final;
    res.final_loss =
        std::isfinite(f0.eval_loss) ? f0.eval_loss : std::numeric_limits<double>::quiet_NaN();
    bool same = true;
    for (const auto& l : logs) {
      eval_finite = eval_finite && (!l.final->has_loss || std::isfinite(l.final->eval_loss));
      params_finite = params_finite && l.final->params_finite;
      same = same && l.final->params_hash == logs[0].final->params_hash &&
             l.final->optim_hash == logs[0].final->optim_hash &&
             same_loss_scale(l.final->loss_scale, logs[0].final->loss_scale) &&
             l.actions == logs[0].actions;
    }
    j.consistent = same;
    if (eval_finite && std::isfinite(f0.initial_eval_loss)) {
      j.diverged = *res.final_loss > 1.5 * f0.initial_eval_loss;
    }
  }
  j.recovered = res.outcome == Outcome::kCompleted && res.steps_completed == s.job.steps &&
                eval_finite && params_finite;
  // What the fault did is scored on the stack's word: the flight recorder's
  // collective_mismatch, first in the list when it came first, is the harness's reading.
  const auto& first = res.first_detection;
  j.detected =
      first && std::any_of(res.detections.begin(), res.detections.end(), [&](const auto& d) {
        return d.detector != "collective_mismatch" && d.step >= first->step;
      });
}

results::ScenarioResult judge_evidence(const Scenario& s, const JobEvidence& ev,
                                       const JobResult& reaped) {
  results::ScenarioResult res = result_for(s, ev.run_dir);
  // A relaunched job ([job] restarts) is timed from its first launch's start.
  const int64_t t0 = ev.earlier.empty() ? reaped.t0_us : ev.earlier.front().job.t0_us;
  res.wall_ms = double(reaped.t_end_us - t0) / 1000.0;
  const std::vector<RankEvidence>& logs = ev.ranks;
  // The launcher's crash in its own teardown, once every rank wrote its exit record, is not the
  // job's end: from here on the launcher's status is the one the ranks' records give
  // (launcher_exit.cpp); report.json keeps what was reaped, and why.
  const LauncherExit launcher = launcher_exit(logs, reaped);
  JobResult job = reaped;
  job.exit_code = launcher.counted;

  res.outcome = job_outcome(logs, job);
  // The injections of every launch; a fault that fired in any of them has fired. The last
  // launch's own first injection times its abort.
  Fired fired;
  for (const auto& launch : ev.earlier) {
    const Fired f = collect_injections(launch.ranks, t0, res);
    fired.faults.insert(f.faults.begin(), f.faults.end());
    if (f.first_fault_step) {
      fired.first_fault_step =
          std::min(fired.first_fault_step.value_or(*f.first_fault_step), *f.first_fault_step);
    }
    if (f.first_inject_t) {
      fired.first_inject_t =
          std::min(fired.first_inject_t.value_or(*f.first_inject_t), *f.first_inject_t);
    }
  }
  const Fired own = collect_injections(logs, t0, res);
  fired.faults.insert(own.faults.begin(), own.faults.end());
  if (own.first_fault_step) {
    fired.first_fault_step =
        std::min(fired.first_fault_step.value_or(*own.first_fault_step), *own.first_fault_step);
  }
  if (own.first_inject_t) fired.first_inject_t = own.first_inject_t;
  // The post-mortem and the attribution see the processes' ends (the controller's pid watch, the
  // ranks' own watch across hosts), never the injections: who died is what the processes say.
  JobResult seen = job;
  seen.rank_gone_us = ranks_gone_us(logs, job);
  const Postmortem pm = postmortem(s, logs, seen, res.outcome);
  Judged j;
  j.deadlock = pm.deadlock;
  j.false_positives =
      judge_detections(s, logs, seen, pm, fired.first_fault_step, fired.first_inject_t, res);

  judge_end_state(s, logs, j, res);

  // What a fault did needs a fault that fired: with none (injection not verified, a
  // probabilistic fault that drew no step) the field stays null.
  if (!s.faults.empty() && !res.injections.empty()) {
    if (res.outcome == Outcome::kHung || j.deadlock)
      res.fault_outcome = FaultOutcome::kHang;
    else if (j.detected)
      res.fault_outcome =
          j.recovered ? FaultOutcome::kDetectedRecovered : FaultOutcome::kDetectedUnrecovered;
    else if (!j.recovered || j.diverged || (j.consistent && !*j.consistent))
      res.fault_outcome = FaultOutcome::kSilentCorruption;
    else
      res.fault_outcome = FaultOutcome::kMasked;
  }

  // Blame: the stack's first detection, else the harness's post-mortem.
  if (res.first_detection) {
    j.blamed = res.first_detection->ranks;
    j.blamed_cause = res.first_detection->cause;
  } else if (!pm.dead.empty()) {
    j.blamed = pm.dead;
    j.blamed_cause = to_string(Cause::kRankFailure);
  } else if (!pm.absent.empty() && res.outcome != Outcome::kCompleted) {
    j.blamed = pm.absent;
    j.blamed_cause = to_string(Cause::kHang);
  } else {
    // A relaunched job: the post-mortem of the first launch that ended abnormally.
    for (const auto& launch : ev.earlier) {
      const Outcome outcome = launch_outcome(launch.ranks, launch.job);
      if (outcome == Outcome::kCompleted) continue;
      JobResult seen_then = launch.job;
      seen_then.rank_gone_us = ranks_gone_us(launch.ranks, launch.job);
      const Postmortem then = postmortem(s, launch.ranks, seen_then, outcome);
      if (!then.dead.empty()) {
        j.blamed = then.dead;
        j.blamed_cause = to_string(Cause::kRankFailure);
      } else if (!then.absent.empty()) {
        j.blamed = then.absent;
        j.blamed_cause = to_string(Cause::kHang);
      }
      break;
    }
  }
  if (own.first_inject_t) j.abort_ms = double(job.t_end_us - *own.first_inject_t) / 1000.0;
  results::JobFacts facts;
  if (s.expect.final_matches_clean) j.matches_clean = final_matches_clean(logs, ev.clean);
  j.restarts = int64_t(ev.earlier.size());
  if (s.job.restarts > 0) {
    std::vector<LaunchView> views;
    for (const auto& launch : ev.earlier) views.push_back({&launch.ranks, &launch.job});
    views.push_back({&logs, &reaped});
    LaunchesJudged launches = judge_launches(s, views);
    j.resumed_from_step = launches.last_resumed_from_step;
    j.steps_lost = launches.steps_lost;
    j.resume_ms_max = launches.resume_ms_max;
    facts.launches = std::move(launches.launches);
    facts.restarts = std::move(launches.restarts);
  }

  results::PostMortem& post = facts.postmortem;
  if (!res.first_detection && !j.blamed.empty())
    post.blame = results::Blame{j.blamed, j.blamed_cause};
  post.last_collective = pm.last_collective;
  post.collective_mismatch = pm.mismatch;
  post.absent_ranks = pm.absent;
  if (pm.first_gap_seq >= 0) post.first_gap_collective = pm.first_gap_seq;
  post.dead_ranks = pm.dead;
  post.deadlock = pm.deadlock;
  post.longest_collective_wait_ms = pm.longest_wait_ms;
  if ((res.outcome == Outcome::kAborted || res.outcome == Outcome::kCrashed) && j.abort_ms >= 0) {
    facts.abort_latency_ms = j.abort_ms;
  }
  facts.false_positives = j.false_positives;
  facts.consistent = j.consistent;
  facts.recovered = j.recovered;
  facts.launcher_exit_code = reaped.exit_code;
  facts.launcher_exit = launcher_exit_facts(launcher);
  facts.orphans_killed = job.orphans_killed;
  facts.memory = peak_memory(logs, job);
  facts.clock_offsets = clock_offsets(logs);
  facts.remote_ranks.assign(job.remote_ranks.begin(), job.remote_ranks.end());
  // The per-rank step-time table (phase split, straggler score), whatever the stack checks.
  std::vector<std::map<int64_t, StepEndEvent::Phases>> phases;
  for (const auto& r : logs) phases.push_back(r.phases);
  facts.step_times = results::rank_step_times(phases);
  facts.step_scores = results::step_scores(phases);  // report.html's per-step score chart
  res.judged = std::move(facts);
  res.timeline = job_timeline(logs, t0, res.wall_ms);
  // A relaunched job: every launch on the one timeline (ms since the first launch's start).
  for (const auto& launch : ev.earlier) {
    add_launch_timeline(res.timeline,
                        job_timeline(launch.ranks, t0, double(launch.job.t_end_us - t0) / 1000.0));
  }

  add_checks(s, logs, job, j, res);
  decide_verdict(s, ev, job, fired.faults, res);
  if (!ev.slurm_cancelled.empty() && res.outcome != Outcome::kCompleted && !res.reason.empty()) {
    // The ranks with no exit record and the launcher's SIGKILL/SIGTERM are Slurm's doing: say
    // so first, or the reason reads as a crash of every rank.
    res.reason = fmt::format(
        "Slurm cancelled the job step from outside ({} in ranks/launcher.log: scancel, the "
        "job's time limit, or a node set down or failed), not a fault or a rank; {}",
        ev.slurm_cancelled, res.reason);
  }
  return res;
}

}  // namespace

// An event whose field has the wrong type (`"step": "x"`: a corrupted or foreign log) makes
// nlohmann's value() throw; the scenario is then an error naming the folder, never a crash of
// the run (found by nanchaos_fuzz_report, docs/fuzzing.md).
results::ScenarioResult result_for(const Scenario& s, const std::string& run_dir) {
  results::ScenarioResult res;
  res.name = s.name;
  res.file = s.file;
  res.seed = s.seed;
  res.ranks = s.job.ranks;
  res.run_dir = run_dir;
  return res;
}

results::ScenarioResult judge(const Scenario& s, const JobEvidence& ev, const JobResult& job) {
  std::string unreadable;
  if (ev.unreadable) {
    unreadable = *ev.unreadable;
  } else if (ev.ranks.size() != size_t(s.job.ranks)) {
    // A caller's slip, never a job's: read_job_evidence reads one log per rank.
    results::ScenarioResult res = result_for(s, ev.run_dir);
    res.reason = fmt::format("cannot judge: evidence of {} rank(s) for [job].ranks = {}",
                             ev.ranks.size(), s.job.ranks);
    return res;
  } else {
    try {
      return judge_evidence(s, ev, job);
    } catch (const nlohmann::json::exception& e) {
      unreadable = e.what();
    }
  }
  results::ScenarioResult res = result_for(s, ev.run_dir);
  res.wall_ms = double(job.t_end_us - job.t0_us) / 1000.0;
  res.verdict = results::Verdict::kError;
  res.reason =
      ev.unreadable
          ? fmt::format("cannot judge: {}", unreadable)
          : fmt::format("cannot judge: an event in {}/events has a field of the wrong type: {}",
                        ev.run_dir, unreadable);
  return res;
}

results::ScenarioResult judge_run(const Scenario& s, const std::string& run_dir,
                                  const JobResult& job, const std::vector<JobResult>& earlier) {
  return judge(s, read_job_evidence(int(s.job.ranks), run_dir, job, earlier), job);
}

results::Outcome launch_outcome(const std::vector<RankEvidence>& ranks, const JobResult& reaped) {
  JobResult job = reaped;
  job.exit_code = launcher_exit(ranks, reaped).counted;
  return job_outcome(ranks, job);
}

}  // namespace nanchaos::harness
