// The reference stack (reference_stack.h): detector dispatch, consensus, replay refinement, the
// loss scaler and the recovery policies of one rank.
#include "detectors/stack/reference_stack.h"

#include <fmt/format.h>

#include <algorithm>

#include "detectors/stack/anomaly_engine.h"
#include "detectors/stack/attribution.h"
#include "harness/common/cause.h"
#include "harness/common/digest.h"
#include "harness/common/log.h"
#include "harness/evidence/event_types.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

using harness::Cause;

using harness::Decision;
using harness::kBits;
using harness::kGradIdx;
using harness::kLogitsFinite;
using harness::kMaxAbs;
using harness::kModuleIdx;
using harness::kModuleOverflow;
using harness::kRowWidth;
using harness::LossScaler;
using harness::now_us;
using harness::Policy;

namespace {

const harness::DetectorInfo& info_of(const Detector& d) {
  return harness::detectors().at(d.name());
}

// Without a detector that arms the collective deadline (the watchdog) a collective waits
// forever, as a stock c10d job does (until the launcher's timeout); with one enabled, it waits
// collective_timeout_ms. An expired or failed collective is that detector's finding.
Deadline deadline(const harness::StackConfig& s) {
  Deadline out;
  for (const auto& name : harness::detector_order()) {
    if (!harness::detectors().at(name).arms_collective_deadline) continue;
    out.detector = name;
    const auto& on = s.detectors.enabled;
    if (std::find(on.begin(), on.end(), name) != on.end()) {
      out.timeout_ms = harness::collective_timeout_ms(s.detectors);
    }
  }
  return out;
}

void write_detect(harness::EventLog& log, const std::string& detector, int64_t step,
                  const Finding& f) {
  harness::DetectEvent det;
  det.detector = detector;
  det.step = step;
  det.layer = f.layer;
  det.cause = f.cause;
  harness::write_event(log, det);
}

// The consensus bits of the detectors whose registration sets `flag`.
uint64_t bits_where(bool harness::DetectorInfo::*flag) {
  uint64_t bits = 0;
  const auto& order = harness::detector_order();
  for (size_t b = 0; b < order.size(); ++b) {
    if (harness::detectors().at(order[b]).*flag) bits |= uint64_t(1) << b;
  }
  return bits;
}

}  // namespace

ReferenceStack::ReferenceStack(const harness::StackConfig& s, harness::EventLog& log,
                               harness::Communicator& comm, JobLayout layout, torch::Device device,
                               int watchdog_exit, std::function<void(int)> write_exit,
                               std::function<ModelState()> state)
    : s_(s), log_(log), layout_(std::move(layout)), job_state_(std::move(state)), replay_(s) {
  for (const auto& name : s_.detectors.enabled) {
    const auto& info = harness::detectors().at(name);
    if (!info.make) continue;  // optional, not built (the controller refused the rest)
    detectors_.push_back(info.make(s_));
  }
  consensus_ = s_.detectors.consensus && !detectors_.empty();
  for (auto& d : detectors_) anomaly_mode_ |= d->wants_anomaly_mode();
  // Anomaly mode here (always-on or the replay's) never reads the forward's backtrace, the
  // mode's main cost on CPU (anomaly_engine.h).
  use_traceless_anomaly_metadata();
  // Always-on anomaly mode (the `anomaly` detector): the costly baseline.
  if (anomaly_mode_) anomaly_hold_.emplace();
  coll_ = std::make_unique<StackComm>(comm, log_, deadline(s_), layout_.cuda, device, watchdog_exit,
                                      std::move(write_exit));
  for (const auto& d : detectors_) {
    has_post_reduce_ |= d->hook() == Hook::kPostReduce;
    has_consensus_hook_ |= d->hook() == Hook::kConsensus;
    // The loss check's attribution gets the module on the step itself (transient faults too).
    localize_ |= consensus_ && info_of(*d).localizes_loss;
    if (d->hook() == Hook::kReplica) replica_ = d.get();
    if (d->hook() == Hook::kRecompute) {
      // Bit-for-bit comparison of two computations needs reproducible kernels: the CPU's are at
      // a fixed thread count; CUDA's only under the job's deterministic mode.
      if (layout_.cuda && !at::globalContext().deterministicAlgorithms()) {
        const std::string why =
            "two computations on CUDA agree bit for bit only under deterministic algorithms "
            "(at::globalContext().deterministicAlgorithms()), which are off in this process: "
            "the detector is off";
        log_.write("detector_refused", {{"detector", d->name()}, {"reason", why}});
        log::warn("detector {}: {}", d->name(), why);
      } else {
        recompute_.push_back(d.get());
      }
    }
  }
  // Only fp16 needs a dynamic loss scaler (bf16 has fp32's exponent range), as with GradScaler.
  if (s_.job.precision == harness::DType::kFp16) scaler_.emplace(s_.recovery.scaler);
}

ReferenceStack::~ReferenceStack() = default;

ModelState ReferenceStack::state() {
  ModelState m = job_state_();
  m.scaler = scaler();
  m.lr_scale = &carry_.lr_scale;
  return m;
}

// ---- an in-launch campaign's checkpoint

StackState ReferenceStack::checkpoint() const {
  StackState st;
  for (const auto& d : detectors_) st.detectors.push_back(d->clone());
  if (scaler_) st.scaler = scaler_->state();
  st.carry = carry_;
  st.seq = coll_->seq();
  return st;
}

void ReferenceStack::restore(const StackState& st) {
  replica_ = nullptr;
  for (size_t i = 0; i < detectors_.size(); ++i) {
    Detector* old = detectors_[i].get();
    detectors_[i] = st.detectors.at(i)->clone();
    if (detectors_[i]->hook() == Hook::kReplica) replica_ = detectors_[i].get();
    std::replace(recompute_.begin(), recompute_.end(), old, detectors_[i].get());
  }
  if (scaler_ && st.scaler) scaler_->restore(*st.scaler);
  carry_ = st.carry;
  coll_->set_seq(st.seq);
  rollback_requested_ = false;
}

// ---- between steps

void ReferenceStack::before_step(int64_t step) {
  if (s_.recovery.has(Policy::kRollback) && step % s_.recovery.snapshot_every == 0) {
    carry_.snapshot = std::make_shared<const Snapshot>(step, state());
    log_.write("snapshot", {{"step", step}});
  }
  rollback_requested_ = false;
}

std::optional<Stop> ReferenceStack::after_step(int64_t /*step*/, bool detected, bool reexecuted,
                                               int64_t high_water) {
  if (detected) {
    ++carry_.consecutive;
  } else if (!reexecuted) {
    carry_.consecutive = 0;
    carry_.rollbacks = 0;
  }
  if (carry_.aborting) return Stop{"policy abort", carry_.abort_cause};
  if (detected && carry_.consecutive >= s_.recovery.max_consecutive) {
    const std::string reason =
        carry_.rollbacks == 0
            ? fmt::format("{} consecutive detections (max_consecutive)", carry_.consecutive)
            : fmt::format(
                  "{} detections without a clean step past step {} ({} rollbacks; "
                  "max_consecutive): the fault returns on every re-execution",
                  carry_.consecutive, high_water, carry_.rollbacks);
    return Stop{reason, carry_.abort_cause};
  }
  return std::nullopt;
}

std::optional<int64_t> ReferenceStack::rollback(int64_t step) {
  if (!rollback_requested_ || !carry_.snapshot) return std::nullopt;
  // Re-execute from the last snapshot taken before the faulty step; persistent faults fire
  // again on the re-executed steps, transient ones do not.
  carry_.snapshot->restore(state());
  ++carry_.rollbacks;
  log_.write("rollback", {{"step", step}, {"to_step", carry_.snapshot->step()}});
  return carry_.snapshot->step();
}

// ---- the step pipeline

void ReferenceStack::begin_step(int64_t step) {
  step_ = step;
  local_findings_.clear();
  first_local_us_.reset();
  for (auto& d : detectors_) d->reset();
  rows_.assign(size_t(coll_->world()) * kRowWidth, 0.0);
  row_.assign(kRowWidth, 0.0);
  row_[kLogitsFinite] = 1.0;
  row_[kModuleIdx] = -1.0;
  row_[harness::kLrRaised] = -1.0;
  row_[harness::kStepCounter] = -1.0;
  detail_ = false;
  probes_.clear();
  localize_us_ = 0;
  recompute_due_ = !replaying() && std::any_of(recompute_.begin(), recompute_.end(),
                                               [step](const Detector* d) { return d->due(step); });
  recomputing_ = false;
  sum_modules_.clear();
  step_sums_.clear();
  again_sums_.clear();
}

void ReferenceStack::note_lr(int64_t step, double lr) {
  row_[harness::kLrRaised] = carry_.lr_raise.note(step, lr);
  row_[harness::kLr] = lr;
}

// The loss scale and the largest optimizer step counter, read only on a flagged step (the
// detail round): attribution.h attribute_training_state compares them across ranks.
void ReferenceStack::fill_training_state() {
  const ModelState m = state();
  row_[harness::kLossScale] = m.scaler ? m.scaler->scale() : 0.0;
  row_[harness::kStepCounter] = double(max_step_counter(m));
}

void ReferenceStack::run_detectors(Hook hook, const StepView& view) {
  for (auto& d : detectors_) {
    if (d->hook() == hook) run_one(*d, view);
  }
}

void ReferenceStack::run_one(Detector& d, const StepView& view) {
  auto finding = d.check(view);
  if (!finding) return;
  const int bit = harness::detector_bit(d.name());
  const auto bits = uint64_t(row_[kBits]);
  if (!first_local_us_) first_local_us_ = now_us();
  row_[kBits] = double(bits | (uint64_t(1) << bit));
  write_detect(log_, d.name(), view.step, *finding);
  // The finding's code travels in the detector's registered consensus column.
  const int column = harness::detectors().at(d.name()).column;
  if (column >= 0) row_[size_t(column)] = finding->code;
  local_findings_[bit] = *finding;
}

void ReferenceStack::check(Hook hook, const StepView& view) {
  if (recomputing_) return;  // the recompute is compared as a whole, in end_recompute
  if (replaying()) {
    replay_.check(hook, view);
    return;
  }
  step_ = view.step;
  run_detectors(hook, view);
  const auto logits_nonfinite = [](const std::pair<const int, Finding>& f) {
    return f.second.code == 0 &&
           harness::detectors().at(harness::detector_order()[size_t(f.first)]).localizes_loss;
  };
  if (hook == Hook::kLoss && localize_ && !probes_.empty() &&
      std::any_of(local_findings_.begin(), local_findings_.end(), logits_nonfinite)) {
    // Non-finite logits: which module, and was it the half rounding.
    const int64_t t0 = now_us();
    const ProbeSums::First first = probes_.first_nonfinite(layout_.module_names);
    if (first.module >= 0) {
      row_[kModuleIdx] = first.module;
      row_[kModuleOverflow] = first.overflow ? 1.0 : 0.0;
    }
    localize_us_ += now_us() - t0;
  }
}

void ReferenceStack::replica_round(StepView& view) {
  if (!replica_ || !consensus_ || !replica_->due(view.step)) return;
  const int64_t step = view.step, t0 = now_us();
  const std::vector<uint64_t> mine = replica_digests(state());
  harness::Digest all;
  for (uint64_t v : mine) all.add_u64(v);
  // The exchange's collectives are named after the detector (`replica`, `replica_detail`).
  const std::string& name = replica_->name();
  const std::vector<uint64_t> combined = coll_->allgather_u64({all.value()}, name, step);
  carry_.replica_vote = harness::replica_vote(combined);
  std::vector<uint64_t> per_tensor;
  if (carry_.replica_vote.diverged) per_tensor = coll_->allgather_u64(mine, name + "_detail", step);
  view.replica_combined = &combined;
  view.replica_per_tensor = &per_tensor;
  view.replica_names = &layout_.replica_names;
  view.replica_params = layout_.grad_names.size();
  run_detectors(Hook::kReplica, view);
  view.replica_combined = view.replica_per_tensor = nullptr;
  // Its cost (digest + exchange), read by bench/step_bench.cpp; on a divergence every entry
  // in which this rank differs from the source (a drifted training state shows here even
  // though `layer` names the first parameter it then changed).
  nlohmann::json differing = nlohmann::json::array();
  if (carry_.replica_vote.diverged && coll_->rank() != carry_.replica_vote.source) {
    const size_t n = mine.size(), me = size_t(coll_->rank()) * n,
                 src = size_t(carry_.replica_vote.source) * n;
    for (size_t t = 0; t < n; ++t) {
      if (per_tensor[me + t] != per_tensor[src + t]) differing.push_back(layout_.replica_names[t]);
    }
  }
  log_.write("replica_check", {{"step", step},
                               {"us", now_us() - t0},
                               {"diverged", carry_.replica_vote.diverged},
                               {"differing", std::move(differing)}});
}

void ReferenceStack::on_activation(const std::string& module, const torch::Tensor& out) {
  if (replaying()) {
    replay_.on_activation(module, out);
    return;
  }
  if (recompute_due_) {
    // float64: a flipped low mantissa bit of one fp32 element still moves the sum.
    torch::NoGradGuard ng;
    auto sum = out.detach().sum(torch::kDouble);
    if (recomputing_) {
      again_sums_.push_back(std::move(sum));
      return;
    }
    sum_modules_.push_back(module);
    step_sums_.push_back(std::move(sum));
  }
  for (auto& d : detectors_) d->on_activation(module, out);
}

void ReferenceStack::begin_recompute() {
  recompute_t0_ = now_us();
  recomputing_ = true;
  again_sums_.clear();
}

void ReferenceStack::end_recompute(StepView& view) {
  recomputing_ = false;
  view.activation_sums = &step_sums_;
  view.recomputed_activation_sums = &again_sums_;
  view.activation_modules = &sum_modules_;
  const auto bits_before = uint64_t(row_[kBits]);
  // Only the due ones look (recompute_ holds neither a refused detector nor another hook's).
  for (Detector* d : recompute_) {
    if (d->due(view.step)) run_one(*d, view);
  }
  view.activation_sums = view.recomputed_activation_sums = nullptr;
  view.activation_modules = nullptr;
  log_.write("recompute_check", {{"step", view.step},
                                 {"us", now_us() - recompute_t0_},
                                 {"match", uint64_t(row_[kBits]) == bits_before}});
}

void ReferenceStack::note_output(const std::string& module, const torch::Tensor& out,
                                 bool rounded) {
  if (recomputing_) return;
  if (replaying()) {
    replay_.note_output(module, out, rounded);
    return;
  }
  const int64_t t0 = now_us();
  probes_.add(module, out, rounded);
  localize_us_ += now_us() - t0;
}

void ReferenceStack::note_gradient_scan(const harness::ScanStats& pre, float pre_scale) {
  if (replaying() || recomputing_) return;
  // The scan's first non-finite gradient, for the loss scaler's found_inf even when no
  // detector at this hook flagged it (grad, loss_scale and grad_norm_spike wrote theirs).
  if (pre.first_nonfinite >= 0) row_[kGradIdx] = pre.first_nonfinite;
  row_[kMaxAbs] = double(pre.max_abs) * pre_scale;  // magnitude that enters the SUM
}

bool ReferenceStack::wants_early_return() const {
  return !consensus_ && !detectors_.empty() && row_[kBits] != 0;
}

// The naive stack's hand-written early return: skip backward/all-reduce/update on this rank.
// It reports the first of its findings in pipeline order (detector_order()), as decide() does.
void ReferenceStack::early_return(int64_t step) {
  const auto& [bit, first] = *local_findings_.begin();
  harness::DecisionEvent dec;
  dec.step = step;
  dec.detector = harness::detector_order().at(size_t(bit));
  dec.ranks = {coll_->rank()};
  dec.layer = first.layer;
  dec.cause = first.cause;
  dec.action = "early_return";
  dec.local = true;
  dec.first_local_us = first_local_us_.value_or(0);
  harness::write_event(log_, dec);
}

Decision ReferenceStack::decide(int64_t step, const std::function<ReplayResult(int64_t)>& replay) {
  // consensus (consensus.h): a fixed-size summary every step; the [world x kRowWidth] detail
  // only when some rank flagged something. On a clean step `rows_` stays zero.
  step_ = step;
  Decision decision;
  global_max_abs_ = row_[kMaxAbs];
  if (!consensus_) return decision;
  harness::SummaryCounts counts = harness::summary_counts(uint64_t(row_[kBits]));
  if (has_consensus_hook_)
    harness::put_phase_times(counts, coll_->rank(), coll_->world(), phase_us_);
  coll_->allreduce_i64(counts.data(), counts.size(), "consensus", step);
  if (harness::summary_flagged(counts)) {
    fill_training_state();
    std::copy(row_.begin(), row_.end(), rows_.begin() + size_t(coll_->rank()) * kRowWidth);
    coll_->allreduce_rows(rows_, "consensus_detail", step);
    detail_ = true;
    decision = harness::decide(rows_, coll_->world(), layout_.grad_names, layout_.module_names,
                               layout_.replica_names);
    global_max_abs_ = harness::global_max_abs(rows_, coll_->world());
  }
  decided_us_ = now_us();  // every rank agrees here; the replay only refines attribution
  // The replay re-runs one step's computation: it cannot tell anything about state that
  // diverged over earlier steps.
  if (decision.flagged && s_.detectors.replay &&
      harness::detectors().at(decision.detector).refined_by_replay) {
    refine(replay(step), &decision);
  }
  // Training-state drift, or growth under a raised LR (DESIGN.md), named from every rank's row.
  attribute_training_state(rows_, coll_->world(), &decision);
  if (has_consensus_hook_) consensus_detectors(counts, &decision);
  return decision;
}

// The kConsensus detectors (straggler) on every rank's phase times: the same data on every
// rank, so every rank derives the same finding. The flagged ranks write the `detect` event
// (the rank where the symptom is); a finding leads the step's decision when no detector of the
// summary flagged anything (those come first: a numerical fault is acted on).
void ReferenceStack::consensus_detectors(const harness::SummaryCounts& counts, Decision* d) {
  const std::vector<harness::PhaseTimes> times = harness::phase_times(counts, coll_->world());
  StepView view;
  view.step = step_;
  view.rank = coll_->rank();
  view.world = coll_->world();
  view.rank_phase_us = &times;
  for (auto& det : detectors_) {
    if (det->hook() != Hook::kConsensus) continue;
    auto f = det->check(view);
    if (!f || f->ranks.empty()) continue;
    if (std::find(f->ranks.begin(), f->ranks.end(), int64_t(coll_->rank())) != f->ranks.end()) {
      if (!first_local_us_) first_local_us_ = now_us();
      write_detect(log_, det->name(), step_, *f);
    }
    if (d->flagged) continue;
    d->flagged = true;
    d->detector = det->name();
    d->ranks = f->ranks;
    d->layer = f->layer;
    d->cause = f->cause;
    for (int64_t r : f->ranks)
      d->flagged_detail.push_back(
          {{"rank", r}, {"detectors", nlohmann::json::array({det->name()})}});
    decided_us_ = now_us();
  }
}

void ReferenceStack::begin_replay(int64_t step) {
  log_.write("replay_begin", {{"step", step}});
  replay_.begin();
}

ReplayResult ReferenceStack::end_replay(int64_t step) {
  const ReplayResult r = replay_.end(layout_.module_names);
  log_.write("replay_end", {{"step", step},
                            {"reproduced", r.reproduced},
                            {"module", harness::name_at(layout_.module_names, r.first_module)},
                            {"anomaly_op", r.anomaly_op},
                            {"grad", harness::name_at(layout_.grad_names, r.first_grad)},
                            {"param", harness::name_at(layout_.grad_names, r.first_param)}});
  return r;
}

/// Shares every rank's replay result (attribution.h ReplayField), so every rank refines the
/// decision identically.
void ReferenceStack::refine(const ReplayResult& mine, Decision* d) {
  std::vector<double> rows(size_t(coll_->world()) * kReplayWidth, 0.0);
  double* row = &rows[size_t(coll_->rank()) * kReplayWidth];
  row[kReproduced] = mine.reproduced ? 1 : 0;
  row[kReplayModule] = mine.first_module;
  row[kReplayGrad] = mine.first_grad;
  row[kReplayOverflow] = mine.overflow ? 1 : 0;
  row[kReplayParam] = mine.first_param;
  coll_->allreduce_rows(rows, "replay", step_);
  attribute_replay(rows, {layout_.grad_names, layout_.module_names, layout_.replica_names}, d);
}

bool ReferenceStack::recover(Decision& decision, int64_t step, bool* skip) {
  step_ = step;
  if (scaler_ && consensus_) update_scaler(&decision, skip);
  if (!decision.flagged) return false;
  apply_policy(decision, skip);
  // A report-only finding (a straggler) is written, but it is no detection to recover from:
  // the post-reduce detectors still act on this step, and it counts toward no max_consecutive.
  return !harness::detectors().at(decision.detector).report_only;
}

/// GradScaler update from the consensus: found_inf is any rank's non-finite scaled gradient.
/// The same matrix on every rank gives the same scale everywhere.
void ReferenceStack::update_scaler(Decision* d, bool* skip) {
  static const uint64_t inf_bits = bits_where(&harness::DetectorInfo::found_inf);
  bool found_inf = false, other = false;
  for (int r = 0; r < coll_->world(); ++r) {
    const auto bits = uint64_t(rows_[size_t(r) * kRowWidth + kBits]);
    found_inf |= (bits & inf_bits) != 0;
    other |= (bits & ~inf_bits) != 0;
  }
  const double before = scaler_->scale();
  const auto result = scaler_->update(found_inf);
  if (!found_inf) return;
  const bool probe = result == LossScaler::Result::kProbe && !other;
  log_.write("scale_backoff",
             {{"step", step_}, {"from", before}, {"to", scaler_->scale()}, {"probe", probe}});
  *skip = true;  // GradScaler skips optimizer.step() on found_inf
  if (probe) {
    *d = Decision{};  // the scaler probing its range after a growth: not a detection
    return;
  }
  attribute_found_inf(rows_, coll_->world(), d);  // under fp16 a non-finite gradient is found_inf
  if (result == LossScaler::Result::kBelowMin) {
    carry_.aborting = true;
    carry_.abort_cause = to_string(Cause::kFp16Overflow);
  }
}

void ReferenceStack::apply_policy(const Decision& d, bool* skip) {
  const harness::DetectorInfo& info = harness::detectors().at(d.detector);
  // A report-only finding (a straggler) changes no number: nothing to recover.
  const PolicyAction act =
      info.report_only ? PolicyAction{"none"} : choose_action(s_.recovery, info.ranks_by_vote);
  if (act.abort) {
    carry_.aborting = true;
    carry_.abort_cause = d.cause;
  }
  *skip = *skip || act.skip;
  rollback_requested_ = rollback_requested_ || act.rollback;
  if (act.lr_factor != 1.0) carry_.lr_scale *= act.lr_factor;
  if (!d.cause.empty() && !info.report_only) carry_.abort_cause = d.cause;
  harness::DecisionEvent dec;
  dec.step = step_;
  dec.detector = d.detector;
  dec.ranks = d.ranks;
  dec.layer = d.layer;
  dec.cause = d.cause;
  dec.action = act.action;
  dec.transient = d.transient;
  dec.flagged = d.flagged_detail;
  dec.first_local_us = first_local_us_.value_or(0);
  dec.t_us = decided_us_;
  harness::write_event(log_, dec);
  if (act.resync) {
    // Policy `resync` (recovery.h); layouts that differ abort the job.
    const std::string why = resync(state(), carry_.replica_vote, *coll_, log_, step_);
    if (!why.empty()) {
      carry_.aborting = true;
      carry_.abort_cause = to_string(Cause::kReplicaDivergence);
    }
  }
}

bool ReferenceStack::post_reduce(StepView& view, int64_t step, bool detected, bool* skip) {
  step_ = step;
  const harness::ScanStats& post = *view.reduce_stats;
  if (consensus_ && !detail_ && post.any_nonfinite() && has_post_reduce_) {
    // The reduced buffer is the same on every rank, so every rank comes here: the largest
    // contribution (post_reduce tells a SUM overflow from corruption by it) is gathered only
    // now, on the rare step that needs it.
    std::vector<double> m(size_t(coll_->world()), 0.0);
    m[size_t(coll_->rank())] = row_[kMaxAbs];
    coll_->allreduce_rows(m, "max_abs", step);
    global_max_abs_ = *std::max_element(m.begin(), m.end());
  }
  view.global_max_abs = global_max_abs_;
  // post_reduce sees the same reduced buffer on every rank: its decision needs no consensus.
  for (auto& d : detectors_) {
    if (d->hook() != Hook::kPostReduce) continue;
    if (auto f = d->check(view)) {
      if (!first_local_us_) first_local_us_ = now_us();
      write_detect(log_, d->name(), step, *f);
      if (!detected) {
        Decision pd;
        pd.flagged = true;
        pd.detector = d->name();
        pd.layer = f->layer;
        pd.cause = f->cause;
        detected = true;
        decided_us_ = now_us();
        apply_policy(pd, skip);
      }
    }
  }
  return detected;
}

}  // namespace nanchaos::detect
