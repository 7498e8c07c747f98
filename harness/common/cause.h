// The causes a stack may attribute a fault to (DESIGN.md "Attribution"), in one table: the enum
// the code uses, the text every event, report and [expect] cause spells, and the list the
// scenario loader offers. The text is the wire format; compare and assign through this table,
// never through a literal.
//
//   d.cause = to_string(Cause::kHang);                    // "hang"
//   if (d.cause == to_string(Cause::kGradient)) ...
//   std::optional<Cause> c = parse_cause("loss_math");    // Cause::kLossMath
//
// Torch-free, header-light; every function is pure and thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nanchaos::harness {

/// DESIGN.md's attribution table, in its order.
enum class Cause {
  kData,                  ///< "data": the batch (inputs, labels, mask)
  kLossMath,              ///< "loss_math": activations finite, loss non-finite
  kActivation,            ///< "activation": a module's output non-finite, its input finite
  kGradient,              ///< "gradient": gradients non-finite, forward finite
  kParameter,             ///< "parameter": parameters non-finite or jumped at step start
  kFp16Overflow,          ///< "fp16_overflow": half-precision rounding made a finite value inf
  kGradientExplosion,     ///< "gradient_explosion": a spike before any non-finite value
  kCommCorruption,        ///< "comm_corruption": ranks clean, reduced buffer non-finite
  kReduceOverflow,        ///< "reduce_overflow": ranks clean, the sum overflowed the wire dtype
  kHang,                  ///< "hang": a rank absent from a collective past the deadline
  kRankFailure,           ///< "rank_failure": a rank's process gone
  kReplicaDivergence,     ///< "replica_divergence": finite replicas that differ
  kStraggler,             ///< "straggler": a rank's own step time grew (the `slow` fault)
  kCheckpointCorruption,  ///< "checkpoint_corruption": a checkpoint that fails to load/validate
};

/// The cause's text ("hang"). The reference stays valid for the program's life.
const std::string& to_string(Cause c);

/// The cause spelt `text`; nullopt for any other text (an external stack's own cause, "").
std::optional<Cause> parse_cause(std::string_view text);

/// Every cause's text, in the enum's order (the `[expect] cause` choices).
const std::vector<std::string>& cause_names();

}  // namespace nanchaos::harness
