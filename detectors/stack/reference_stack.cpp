// The reference stack (reference_stack.h): detector dispatch, consensus, replay refinement, the
// loss scaler and the recovery policies of one rank.
#include "detectors/stack/reference_stack.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "detectors/stack/anomaly_engine.h"
#include "harness/common/cause.h"
#include "harness/common/digest.h"
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

ReferenceStack::ReferenceStack(const harness::StackConfig& s, harness::EventLog& log,
                               harness::Communicator& comm, JobLayout layout, torch::Device device,
                               int watchdog_exit, std::function<void(int)> write_exit,
                               std::function<ModelState()> state)
    : s_(s),
      log_(log),
      layout_(std::move(layout)),
      job_state_(std::move(state)),
      replay_checks_(s) {
  rank_ = comm.rank();
  world_ = comm.world_size();
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
  if (anomaly_mode_) torch::autograd::AnomalyMode::set_enabled(true);
  // Without a watchdog a collective waits forever, as a stock c10d job does (until the
  // launcher's timeout); with one, it waits collective_timeout_ms.
  const bool watchdog = std::find(s_.detectors.enabled.begin(), s_.detectors.enabled.end(),
                                  "watchdog") != s_.detectors.enabled.end();
  coll_ = std::make_unique<StackComm>(comm, log_, watchdog ? s_.detectors.collective_timeout_ms : 0,
                                      layout_.cuda, device, watchdog_exit, std::move(write_exit));
  for (const auto& d : detectors_) {
    has_post_reduce_ |= d->hook() == Hook::kPostReduce;
    // The loss check's attribution gets the module on the step itself (transient faults too).
    localize_ |= consensus_ && d->name() == "loss";
    if (d->hook() == Hook::kReplica) replica_ = d.get();
  }
  // Only fp16 needs a dynamic loss scaler (bf16 has fp32's exponent range), as with GradScaler.
  if (s_.job.precision == harness::DType::kFp16) scaler_.emplace(s_.recovery.scaler);
}

ReferenceStack::~ReferenceStack() = default;

ModelState ReferenceStack::state() {
  ModelState m = job_state_();
  m.scaler = scaler();
  m.lr_scale = &lr_scale_;
  return m;
}

// ---- an in-launch campaign's checkpoint

StackState ReferenceStack::checkpoint() const {
  StackState st;
  for (const auto& d : detectors_) st.detectors.push_back(d->clone());
  if (scaler_) st.scaler = scaler_->state();
  st.lr_scale = lr_scale_;
  st.aborting = aborting_;
  st.abort_cause = abort_cause_;
  st.snapshot = snapshot_;
  st.consecutive = consecutive_;
  st.rollbacks = rollbacks_;
  st.replica_vote = replica_vote_;
  st.seq = coll_->seq();
  st.lr_raise = lr_raise_;
  return st;
}

void ReferenceStack::restore(const StackState& st) {
  replica_ = nullptr;
  for (size_t i = 0; i < detectors_.size(); ++i) {
    detectors_[i] = st.detectors.at(i)->clone();
    if (detectors_[i]->hook() == Hook::kReplica) replica_ = detectors_[i].get();
  }
  if (scaler_ && st.scaler) scaler_->restore(*st.scaler);
  lr_scale_ = st.lr_scale;
  aborting_ = st.aborting;
  abort_cause_ = st.abort_cause;
  snapshot_ = st.snapshot;
  consecutive_ = st.consecutive;
  rollbacks_ = st.rollbacks;
  replica_vote_ = st.replica_vote;
  coll_->set_seq(st.seq);
  lr_raise_ = st.lr_raise;
  rollback_requested_ = false;
}

// ---- between steps

void ReferenceStack::before_step(int64_t step) {
  if (s_.recovery.has(Policy::kRollback) && step % s_.recovery.snapshot_every == 0) {
    snapshot_ = std::make_shared<const Snapshot>(step, state());
    log_.write("snapshot", {{"step", step}});
  }
  rollback_requested_ = false;
}

std::optional<Stop> ReferenceStack::after_step(int64_t /*step*/, bool detected, bool reexecuted,
                                               int64_t high_water) {
  if (detected) {
    ++consecutive_;
  } else if (!reexecuted) {
    consecutive_ = 0;
    rollbacks_ = 0;
  }
  if (aborting_) return Stop{"policy abort", abort_cause_};
  if (detected && consecutive_ >= s_.recovery.max_consecutive) {
    const std::string reason =
        rollbacks_ == 0 ? fmt::format("{} consecutive detections (max_consecutive)", consecutive_)
                        : fmt::format(
                              "{} detections without a clean step past step {} ({} rollbacks; "
                              "max_consecutive): the fault returns on every re-execution",
                              consecutive_, high_water, rollbacks_);
    return Stop{reason, abort_cause_};
  }
  return std::nullopt;
}

std::optional<int64_t> ReferenceStack::rollback(int64_t step) {
  if (!rollback_requested_ || !snapshot_) return std::nullopt;
  // Re-execute from the last snapshot taken before the faulty step; persistent faults fire
  // again on the re-executed steps, transient ones do not.
  snapshot_->restore(state());
  ++rollbacks_;
  log_.write("rollback", {{"step", step}, {"to_step", snapshot_->step()}});
  return snapshot_->step();
}

// ---- the step pipeline

void ReferenceStack::begin_step(int64_t step) {
  step_ = step;
  local_findings_.clear();
  first_local_us_.reset();
  for (auto& d : detectors_) d->reset();
  rows_.assign(size_t(world_) * kRowWidth, 0.0);
  row_.assign(kRowWidth, 0.0);
  row_[kLogitsFinite] = 1.0;
  row_[kModuleIdx] = -1.0;
  row_[harness::kLrRaised] = -1.0;
  row_[harness::kStepCounter] = -1.0;
  detail_ = false;
  probes_.clear();
  localize_us_ = 0;
}

void ReferenceStack::note_lr(int64_t step, double lr) {
  row_[harness::kLrRaised] = lr_raise_.note(step, lr);
  row_[harness::kLr] = lr;
}

// The loss scale and the largest optimizer step counter, read only on a flagged step (the
// detail round): consensus.h attribute_training_state compares them across ranks.
void ReferenceStack::fill_training_state() {
  const ModelState m = state();
  row_[harness::kLossScale] = m.scaler ? m.scaler->scale() : 0.0;
  row_[harness::kStepCounter] = double(max_step_counter(m));
}

void ReferenceStack::run_detectors(Hook hook, const StepView& view) {
  for (auto& d : detectors_) {
    if (d->hook() != hook) continue;
    auto finding = d->check(view);
    if (!finding) continue;
    const int bit = harness::detector_bit(d->name());
    const auto bits = uint64_t(row_[kBits]);
    if (!first_local_us_) first_local_us_ = now_us();
    row_[kBits] = double(bits | (uint64_t(1) << bit));
    harness::DetectEvent det;
    det.detector = d->name();
    det.step = view.step;
    det.layer = finding->layer;
    det.cause = finding->cause;
    harness::write_event(log_, det);
    // The finding's code travels in the detector's registered consensus column.
    const int column = harness::detectors().at(d->name()).column;
    if (column >= 0) row_[size_t(column)] = finding->code;
    local_findings_[d->name()] = *finding;
  }
}

void ReferenceStack::check(Hook hook, const StepView& view) {
  if (replaying_) {
    replay_checks_.check(hook, view);
    return;
  }
  step_ = view.step;
  run_detectors(hook, view);
  if (hook == Hook::kLoss && localize_ && local_findings_.count("loss") &&
      local_findings_["loss"].code == 0 && !probes_.empty()) {
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
  const std::vector<uint64_t> combined = coll_->allgather_u64({all.value()}, "replica", step);
  replica_vote_ = harness::replica_vote(combined);
  std::vector<uint64_t> per_tensor;
  if (replica_vote_.diverged) per_tensor = coll_->allgather_u64(mine, "replica_detail", step);
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
  if (replica_vote_.diverged && rank_ != replica_vote_.source) {
    const size_t n = mine.size(), me = size_t(rank_) * n, src = size_t(replica_vote_.source) * n;
    for (size_t t = 0; t < n; ++t) {
      if (per_tensor[me + t] != per_tensor[src + t]) differing.push_back(layout_.replica_names[t]);
    }
  }
  log_.write("replica_check", {{"step", step},
                               {"us", now_us() - t0},
                               {"diverged", replica_vote_.diverged},
                               {"differing", std::move(differing)}});
}

void ReferenceStack::on_activation(const std::string& module, const torch::Tensor& out) {
  if (replaying_) {
    replay_checks_.on_activation(module, out);
    return;
  }
  for (auto& d : detectors_) d->on_activation(module, out);
}

void ReferenceStack::note_output(const std::string& module, const torch::Tensor& out,
                                 bool rounded) {
  if (replaying_) {
    replay_probes_.add(module, out, rounded);
    return;
  }
  const int64_t t0 = now_us();
  probes_.add(module, out, rounded);
  localize_us_ += now_us() - t0;
}

void ReferenceStack::note_gradient_scan(const harness::ScanStats& pre, float pre_scale) {
  if (replaying_) return;
  // The scan's first non-finite gradient, for the loss scaler's found_inf even when no
  // detector at this hook flagged it (grad, loss_scale and grad_norm_spike wrote theirs).
  if (pre.first_nonfinite >= 0) row_[kGradIdx] = pre.first_nonfinite;
  row_[kMaxAbs] = double(pre.max_abs) * pre_scale;  // magnitude that enters the SUM
}

bool ReferenceStack::wants_early_return() const {
  return !consensus_ && !detectors_.empty() && row_[kBits] != 0;
}

// The naive stack's hand-written early return: skip backward/all-reduce/update on this rank.
void ReferenceStack::early_return(int64_t step) {
  harness::DecisionEvent dec;
  dec.step = step;
  dec.detector = local_findings_.begin()->first;
  dec.ranks = {rank_};
  dec.layer = local_findings_.begin()->second.layer;
  dec.cause = local_findings_.begin()->second.cause;
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
  coll_->allreduce_i64(counts.data(), counts.size(), "consensus", step);
  if (harness::summary_flagged(counts)) {
    fill_training_state();
    std::copy(row_.begin(), row_.end(), rows_.begin() + size_t(rank_) * kRowWidth);
    coll_->allreduce_rows(rows_, "consensus_detail", step);
    detail_ = true;
    decision = harness::decide(rows_, world_, layout_.grad_names, layout_.module_names,
                               layout_.replica_names);
    global_max_abs_ = harness::global_max_abs(rows_, world_);
  }
  decided_us_ = now_us();  // every rank agrees here; the replay only refines attribution
  // The replay re-runs one step's computation: it cannot tell anything about state that
  // diverged over earlier steps.
  if (decision.flagged && s_.detectors.replay && decision.detector != "replica") {
    refine(replay(step), &decision);
  }
  // Training-state drift, or growth under a raised LR (DESIGN.md), named from every rank's row.
  harness::attribute_training_state(rows_, world_, &decision);
  return decision;
}

void ReferenceStack::begin_replay(int64_t step) {
  log_.write("replay_begin", {{"step", step}});
  replay_checks_.begin();
  replay_probes_.clear();
  replay_anomaly_.emplace();  // anomaly mode for the replay's forward and backward
  replaying_ = true;
}

ReplayResult ReferenceStack::end_replay(int64_t step) {
  replaying_ = false;
  replay_anomaly_.reset();
  const ReplayResult r =
      replay_checks_.result(replay_probes_.first_nonfinite(layout_.module_names));
  log_.write("replay_end", {{"step", step},
                            {"reproduced", r.reproduced},
                            {"module", harness::name_at(layout_.module_names, r.first_module)},
                            {"anomaly_op", r.anomaly_op},
                            {"grad", harness::name_at(layout_.grad_names, r.first_grad)},
                            {"param", harness::name_at(layout_.grad_names, r.first_param)}});
  return r;
}

/// Shares every rank's replay result ([reproduced, first module, first grad, fp16 overflow,
/// first parameter] per rank), so every rank refines the decision identically.
void ReferenceStack::refine(const ReplayResult& mine, Decision* d) {
  constexpr size_t kW = 5;
  std::vector<double> rows(size_t(world_) * kW, 0.0);
  rows[size_t(rank_) * kW + 0] = mine.reproduced ? 1 : 0;
  rows[size_t(rank_) * kW + 1] = mine.first_module;
  rows[size_t(rank_) * kW + 2] = mine.first_grad;
  rows[size_t(rank_) * kW + 3] = mine.overflow ? 1 : 0;
  rows[size_t(rank_) * kW + 4] = mine.first_param;
  coll_->allreduce_rows(rows, "replay", step_);
  const size_t r0 = size_t(d->ranks.front());
  d->transient = rows[r0 * kW + 0] < 0.5;
  // DESIGN.md: parameters non-finite at step start are the cause, whatever they made
  // non-finite downstream (module outputs, the loss, the gradients).
  const int param = int(rows[r0 * kW + 4]);
  if (param >= 0 && d->detector != "batch") {
    d->cause = to_string(Cause::kParameter);
    d->layer = layout_.grad_names.at(size_t(param));
    return;
  }
  const int module = int(rows[r0 * kW + 1]);
  if (module >= 0 && rows[r0 * kW + 3] > 0.5 && d->detector != "batch") {
    d->cause = to_string(Cause::kFp16Overflow);
    d->layer = layout_.module_names.at(size_t(module));
    return;
  }
  // DESIGN.md: a module whose output is non-finite while its input was finite is the cause;
  // the replay's probe sees the first such module in forward order.
  if (module >= 0 &&
      (d->cause == to_string(Cause::kActivation) || d->cause == to_string(Cause::kGradient)) &&
      d->detector != "batch") {
    d->cause = to_string(Cause::kActivation);
    d->layer = layout_.module_names.at(size_t(module));
  }
}

bool ReferenceStack::recover(Decision& decision, int64_t step, bool* skip) {
  step_ = step;
  if (scaler_ && consensus_) update_scaler(&decision, skip);
  if (!decision.flagged) return false;
  apply_policy(decision, skip);
  return true;
}

/// GradScaler update from the consensus: found_inf is any rank's non-finite scaled gradient.
/// The same matrix on every rank gives the same scale everywhere.
void ReferenceStack::update_scaler(Decision* d, bool* skip) {
  const uint64_t inf_bits = (uint64_t(1) << harness::detector_bit("grad")) |
                            (uint64_t(1) << harness::detector_bit("loss_scale"));
  bool found_inf = false, other = false;
  for (int r = 0; r < world_; ++r) {
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
  if (d->detector == "grad") {  // under fp16 a non-finite gradient is the scaler's found_inf
    d->detector = "loss_scale";
    d->cause = to_string(Cause::kFp16Overflow);
    // ... unless the training state says why: a drifted scale or LR, or a raised LR.
    harness::attribute_training_state(rows_, world_, d);
  }
  if (result == LossScaler::Result::kBelowMin) {
    aborting_ = true;
    abort_cause_ = to_string(Cause::kFp16Overflow);
  }
}

void ReferenceStack::apply_policy(const Decision& d, bool* skip) {
  const PolicyAction act = choose_action(s_.recovery, d.detector);
  if (act.abort) {
    aborting_ = true;
    abort_cause_ = d.cause;
  }
  *skip = *skip || act.skip;
  rollback_requested_ = rollback_requested_ || act.rollback;
  if (act.lr_factor != 1.0) lr_scale_ *= act.lr_factor;
  if (!d.cause.empty()) abort_cause_ = d.cause;
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
    const std::string why = resync(state(), replica_vote_, *coll_, log_, step_);
    if (!why.empty()) {
      aborting_ = true;
      abort_cause_ = to_string(Cause::kReplicaDivergence);
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
    std::vector<double> m(size_t(world_), 0.0);
    m[size_t(rank_)] = row_[kMaxAbs];
    coll_->allreduce_rows(m, "max_abs", step);
    global_max_abs_ = *std::max_element(m.begin(), m.end());
  }
  view.global_max_abs = global_max_abs_;
  // post_reduce sees the same reduced buffer on every rank: its decision needs no consensus.
  for (auto& d : detectors_) {
    if (d->hook() != Hook::kPostReduce) continue;
    if (auto f = d->check(view)) {
      if (!first_local_us_) first_local_us_ = now_us();
      harness::DetectEvent det;
      det.detector = d->name();
      det.step = step;
      det.layer = f->layer;
      det.cause = f->cause;
      harness::write_event(log_, det);
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
