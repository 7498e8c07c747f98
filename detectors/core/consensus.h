// The consensus round's data and the decision every rank derives from it.
//
// Two rounds, the second only on flagged steps:
// 1. the summary (every step): a SUM all-reduce of summary_width() int64 counts, slot b = 1 when
//    this rank's detector detector_order()[b] flagged (summary_counts()). Its size does not depend
//    on the world size (8 bytes per registered detector: 112 at any world size with 14 detectors),
//    as DeepSpeed's MAX-reduced overflow flag and Megatron's all-reduced found_inf. Integer counts
//    are exact and carry no float, so no NaN can be lost in a reduction (a float MAX can drop one).
//    Every rank gets the same counts and so takes the same branch. With the `straggler` detector
//    enabled, every rank's own phase times of its last step follow the counts (put_phase_times): 32
//    bytes a rank, in the same collective.
// 2. the detail (only when some count is non-zero, summary_flagged()): each rank fills its own
//    row of a [world x kRowWidth] float64 matrix (zeros elsewhere) and the matrix is
//    SUM-all-reduced: every rank then holds every rank's detector bits and attribution hints, and
//    decide() is a pure function of that matrix (world x 56 bytes: 3.5 KiB at 64 ranks).
// Torch-free.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "detectors/core/straggler.h"

namespace nanchaos::harness {

/// Bit i of a rank's detector word is detector_order()[i] (registry.h: the detectors sorted by
/// their registered pipeline `order`). The first detector of a step is the flagged one that
/// comes first there.
/// Index in detector_order(), -1 if unknown.
int detector_bit(const std::string& name);

/// Slots of the fixed-size summary round: one count per registered detector, in detector_order().
size_t summary_width();
using SummaryCounts = std::vector<int64_t>;

/// This rank's summary contribution: slot b = 1 when bit b of `bits` (a row's kBits) is set.
SummaryCounts summary_counts(uint64_t bits);

/// True when any rank flagged any detector (any of the first summary_width() slots of the
/// all-reduced summary is non-zero; slots after them carry the phase times, below).
bool summary_flagged(const SummaryCounts& counts);

/// With a kConsensus detector enabled (`straggler`), every rank's own phase times of its last
/// step ride on the summary: kStepPhases int64 slots (us) per rank after the counts, each filled
/// by its rank only, so the SUM is an exact all-gather (8 x 4 bytes a rank: 2 KiB at 64 ranks).
/// `mine` into this rank's slots of `counts` (resized to hold them).
void put_phase_times(SummaryCounts& counts, int rank, int world, const PhaseTimes& mine);
/// Every rank's phase times from an all-reduced summary that put_phase_times filled.
std::vector<PhaseTimes> phase_times(const SummaryCounts& counts, int world);

/// Columns of a rank's row.
enum RowField : int {
  kBits = 0,          ///< detector bits (bit i = detector_order()[i] flagged on this rank)
  kGradIdx = 1,       ///< first non-finite gradient, index in backward order; grad_norm_spike:
                      ///< the parameter whose norm rose the most (-1: none known)
  kBatchField = 2,    ///< batch detector: 0 inputs, 1 labels
  kLogitsFinite = 3,  ///< loss detector: 1 when the logits were finite (loss math)
  kMaxAbs = 4,        ///< max |g| entering the SUM (after pre-division)
  kParamIdx = 5,      ///< param detector: first non-finite parameter, backward order
  kModuleIdx = 6,     ///< first non-finite module output, forward order (-1 none): the activation
                      ///< detector's, or the always-on localization's when the loss was non-finite
  kReplicaIdx = 7,    ///< replica detector: first differing tensor, replica order (replica.h)
  kModuleOverflow = 8,  ///< 1: that module's output left the half range (fp16_overflow)
  kLrRaised = 9,        ///< steps since this rank's applied learning rate was last raised
                        ///< (LrRaise), -1: never
  kLr = 10,             ///< the learning rate this rank applies at the step
  kLossScale = 11,      ///< its loss scale (0 without a scaler)
  kStepCounter = 12,    ///< its largest optimizer step counter (-1: the optimizer keeps none)
  kSdcIdx = 13,         ///< sdc detector: first differing gradient (backward order) when >= 0,
                        ///< else -(1 + first differing module output, forward order)
  kRowWidth = 14
};

/// names[index] for an index a row carries as a double; "" when it is negative (none known) or
/// outside the list.
inline std::string name_at(const std::vector<std::string>& names, double index) {
  return index >= 0 && size_t(index) < names.size() ? names[size_t(index)] : std::string();
}

/// What every rank agreed happened at a step.
struct Decision {
  bool flagged = false;
  std::string detector;        ///< first flagged detector in pipeline order
  std::vector<int64_t> ranks;  ///< ranks on which that detector fired
  std::string layer;           ///< DESIGN.md attribution from the first blamed rank's row
  std::string cause;
  std::optional<bool> transient;                            ///< set by the replay
  nlohmann::json flagged_detail = nlohmann::json::array();  ///< every rank's detectors
};

/// Derives the decision from the all-reduced matrix: the first flagged detector, the ranks it
/// fired on, and its registered attribution rule (registry.h DetectorInfo::attribute) applied to
/// the first blamed rank's row. `bwd_names` maps gradient/parameter indices to names (backward
/// order); a rule throws std::out_of_range on an index outside it where the index must be valid.
/// `module_names` maps module indices (forward order) to names; `replica_names` the replica
/// detector's tensor indices (parameters in forward order, buffers, "training_state").
Decision decide(const std::vector<double>& rows, int world,
                const std::vector<std::string>& bwd_names,
                const std::vector<std::string>& module_names = {},
                const std::vector<std::string>& replica_names = {});

/// DESIGN.md's "growth under a raised LR" (cause gradient_explosion): a step's applied learning
/// rate is *raised* when it is at least kFactor times the rank's previous step's (a schedule's
/// warm-up or decay moves it by far less per step; an LR blow-up such as a misplaced
/// scheduler.step() or a wrong unit multiplies it); a finiteness detection within kWindow steps
/// after a raise on any rank is the blow-up the raise caused, not the layer where it surfaced.
struct LrRaise {
  static constexpr double kFactor = 10.0;
  static constexpr int64_t kWindow = 10;  ///< steps
  double last_lr = 0;                     ///< the previous step's applied LR (0: none yet)
  int64_t raised_step = -1;               ///< the last step whose LR was raised (-1: none)

  /// Records `step`'s applied LR; returns the kLrRaised column for it: steps since the last
  /// raise (any distance; the window is attribution.h grew_under_raised_lr's), -1 when none.
  double note(int64_t step, double lr);
};

// The training-state attribution that reads kLrRaised, kLr, kLossScale and kStepCounter:
// detectors/stack/attribution.h.

/// max over ranks of the kMaxAbs column.
double global_max_abs(const std::vector<double>& rows, int world);

}  // namespace nanchaos::harness
