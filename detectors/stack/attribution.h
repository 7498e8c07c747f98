// Attribution: the rank, layer and cause a decision names (DESIGN.md "Attribution": what the
// stack can know without being told).
//
// | first evidence                                                  | cause                       |
// |-----------------------------------------------------------------|-----------------------------|
// | batch detector on inputs or labels                              | data                        |
// | activations finite, loss non-finite                             | loss_math                   |
// | a module's output non-finite (probe or replay), its input finite| activation (layer = module) |
// | half rounding turned a module's finite fp32 output into +-inf   | fp16_overflow (layer =      |
// |   (probe), or found_inf with every activation finite            |   that module)              |
// | gradients non-finite, forward finite                            | gradient (layer = first     |
// |                                                                 |   parameter, backward order)|
// | parameters non-finite or jumped at step start                   | parameter                   |
// | grad-norm or loss spike before any non-finite value, or growth  | gradient_explosion          |
// |   under a raised LR                                             |                             |
// | every rank clean before the all-reduce, reduced buffer          | comm_corruption             |
// |   non-finite, local values could not overflow the wire dtype    |                             |
// | every rank clean before the all-reduce, reduced buffer +-inf,   | reduce_overflow             |
// |   max-abs x world size beyond the wire dtype's range            |                             |
// | a rank absent from collective #k past the deadline              | hang (rank = the absent)    |
// | a rank's process gone                                           | rank_failure                |
//
// Where each row is decided, in the order a decision goes through them:
//   1. the first detector's own rule, from the first blamed rank's consensus row
//      (detectors/<name>.cpp DetectorInfo::attribute, applied by consensus.h decide()): data,
//      loss_math, activation (the loss detector's always-on localization), gradient, parameter,
//      the spikes, replica; post_reduce names comm_corruption or reduce_overflow in its finding;
//   2. here, the stack-level rules that refine it: the replay's evidence (attribute_replay),
//      the loss scaler's found_inf under fp16 (attribute_found_inf) and the ranks' training
//      state (attribute_training_state: drift, growth under a raised LR);
//   3. hang and rank_failure: the watchdog's finding (stack_comm.h) and the controller's
//      post-mortem (harness/controller/postmortem.cpp), which names the absent or dead ranks.
// Every function here is pure and torch-free: every rank computes the same result from the same
// all-reduced data. docs/architecture.md "Attribution" gives the table per detector.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "detectors/core/consensus.h"
#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

/// One rank's replay result as the replay round carries it (a [world x kReplayWidth] float64
/// matrix, SUM-all-reduced; replay.h ReplayResult).
enum ReplayField : int {
  kReproduced = 0,      ///< 1: a replay check flagged
  kReplayModule = 1,    ///< first non-finite module output, forward order (-1: none)
  kReplayGrad = 2,      ///< first non-finite gradient, backward order (-1: none)
  kReplayOverflow = 3,  ///< 1: that module's output left the half range
  kReplayParam = 4,     ///< first non-finite parameter at step start, backward order (-1: none)
  kReplayWidth = 5
};

/// Refines `d` with the first blamed rank's replay row (`rows`: [world x kReplayWidth]):
/// transient when the replay did not reproduce the fault; then, unless the decision's detector
/// is not `refined_to_layer` (batch), DESIGN.md's order: a non-finite parameter at step start is
/// the cause (`parameter`, whatever it made non-finite downstream); else a module whose output
/// left the half range (`fp16_overflow`); else, for an `activation` or `gradient` decision, the
/// first module whose output went non-finite (`activation`). Layers are names from `names`
/// (backward for parameters, modules for outputs); an index outside them throws
/// std::out_of_range.
void attribute_replay(const std::vector<double>& rows, const harness::AttributionNames& names,
                      harness::Decision* d);

/// Under fp16 (a dynamic loss scaler), on found_inf: a decision led by a `found_inf` detector
/// other than the one that `reports_found_inf` (grad) is reported as that one (loss_scale) with
/// cause fp16_overflow, then attribute_training_state (a drifted scale or LR, or a raised LR,
/// says why). Other decisions stand.
void attribute_found_inf(const std::vector<double>& rows, int world, harness::Decision* d);

/// The ranks whose training state (the kLr, kLossScale, kStepCounter columns) differs from the
/// majority's; empty when every rank agrees. A tie (2 ranks: no vote says which is right) goes
/// against the group holding a rank in `flagged` (the ranks a detector fired on, when they are
/// not every rank: the state that differs is where the symptom showed, e.g. the rank whose
/// grown loss scale overflowed), then the larger LR, then the larger step counter (a scheduler
/// or a counter stepped too often drifts upward: nanotron 242), then against the group without
/// the lowest rank, as the replica vote (replica.h). Ascending.
std::vector<int64_t> drifted_ranks(const std::vector<double>& rows, int world,
                                   const std::vector<int64_t>& flagged = {});

/// Refines a consensus decision with the training-state columns, the same on every rank:
/// 1. the ranks' training states differ (drifted_ranks; `flagged` = the decision's ranks unless
///    its detector's ranks are `ranks_by_vote` (replica)) and the cause is a blow-up surfacing
///    (grew_under_raised_lr's list), gradient_explosion or replica_divergence: cause
///    replica_divergence, ranks = the drifted ones (the state that differs is the fault; what
///    it then broke is a consequence);
/// 2. else some rank raised its LR within LrRaise::kWindow steps and the cause is a blow-up
///    surfacing: cause gradient_explosion;
/// 3. then, for a gradient_explosion decision, when some but not all ranks ever raised their LR:
///    ranks = those (a replica check names the replica that took the larger step only by vote).
void attribute_training_state(const std::vector<double>& rows, int world, harness::Decision* d);

/// Whether a decision with `cause` is what a raised LR turns into (activation, loss_math,
/// gradient, parameter, fp16_overflow, reduce_overflow: a blow-up surfacing) and some rank's
/// row says its LR was raised within the window. Data, communication, hang, crash and replica
/// causes stand.
bool grew_under_raised_lr(const std::vector<double>& rows, int world, const std::string& cause);

}  // namespace nanchaos::detect
