// The draw of one campaign fault's own keys (docs/generator.md "Campaign draws"), as a kind's
// `draw` rule sees it (FaultKindInfo, registry.h): the fault's generator, the job it is drawn
// for, the job's targets, and the choices several kinds share. The generic part (kind, ranks,
// step) is drawn first from the same generator by harness/controller/campaign_draw.cpp.
//
//   info.draw = [](FaultDraw& d, nlohmann::ordered_json& f) {
//     f["target"] = d.tensor_target();
//     f["value"] = d.value();
//   };
//
// Every choice comes from the one SplitMix64 stream (harness/common/rng.h): no
// std::*_distribution, so the same seed draws the same faults on any compiler. Changing the order
// or the number of calls of a kind's rule changes that kind's draws (and only that kind's).
// Not thread-safe (one FaultDraw per fault); pure otherwise.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/common/dtype.h"
#include "harness/common/rng.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/target.h"

namespace nanchaos::harness {

/// The range of a finite campaign's `factor` (FaultDraw::factor): at least 1% off, at most 100x,
/// so the corrupted number stays finite and the corruption is the kind real finite SDC makes
/// (a wrong but plausible value), not a blow-up.
inline constexpr double kFiniteFactorMin = 1.01;
inline constexpr double kFiniteFactorMax = 100.0;

/// The bit layout of a float word: fp32 (23 mantissa bits, 8 exponent bits), bf16 (7, 8),
/// fp16 (10, 5); the sign bit is the top one.
struct FloatWord {
  int mantissa_bits = 23;
  int exponent_bits = 8;
  /// The exponent bits a finite campaign flips, from the lowest: 4 of an 8-bit exponent (the
  /// flip scales |x| by 2, 4, 16 or 256), 3 of fp16's 5 (2, 4, 16). Setting exponent bit k
  /// reaches the all-ones (Inf/NaN) exponent only from an exponent of all ones but bit k: for
  /// these bits |x| >= 2^120 (fp32, bf16) or >= 2^12 (fp16); the top exponent bit does it for
  /// every |x| in [1, 2).
  int low_exponent_bits() const { return exponent_bits == 8 ? 4 : 3; }
  int bits() const { return mantissa_bits + exponent_bits + 1; }
};
/// The word of `d` (fp32, fp16, bf16).
FloatWord float_word(DType d);
/// True when flipping `bit` of `word` is a finite, bounded corruption: a mantissa bit (|x| changes
/// by less than 2x), one of the low exponent bits (FloatWord::low_exponent_bits) or the sign.
bool finite_flip(int64_t bit, const FloatWord& word);
/// True for a drawn `value` that is a finite number (1e30, not "nan"/"inf"/"-inf").
bool finite_value(const nlohmann::ordered_json& value);

class FaultDraw {
 public:
  /// `g`, `s` and `t` must outlive this object.
  FaultDraw(inject::SplitMix64& g, const Scenario& s, const CampaignTargets& t,
            DrawValues values = DrawValues::kAny)
      : g_(g), s_(s), t_(t), values_(values) {}

  const Scenario& scenario() const { return s_; }
  const CampaignTargets& targets() const { return t_; }
  /// What numbers this campaign's faults write (`--values`); a kind's rule honours it or its
  /// FaultKindInfo::values_refusal refuses the mode.
  DrawValues values() const { return values_; }

  /// An integer in [0, n), n >= 1.
  uint64_t below(uint64_t n) { return g_.below(n); }
  /// One of `items` (not empty), uniformly.
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items.at(size_t(g_.below(items.size())));
  }

  /// A value a fault writes: "nan", "inf", "-inf" or 1e30 (a large finite number), uniformly
  /// (the `any` draw); under DrawValues::kNonfinite "nan", "inf" or "-inf", uniformly. Not for
  /// kFinite (a kind draws factor() there).
  nlohmann::ordered_json value();
  /// A bit of a word of `bits` (16 or 32) bits: half the time the top exponent bit (the flip that
  /// turns a weight into a huge number), else any bit (most flips of low mantissa bits are masked).
  int64_t bit(int bits);
  /// A multiplier log-uniform in [kFiniteFactorMin, kFiniteFactorMax] (one uniform01 of the
  /// stream), rounded to 3 decimals so the written number does not depend on the libm's exp/log
  /// in its last bits.
  double factor();
  /// A bit of `word` whose flip is finite by construction (finite_flip): a mantissa bit or one of
  /// the low exponent bits, uniformly (`below(mantissa_bits + low_exponent_bits)`; fp32: 0-26).
  int64_t finite_bit(const FloatWord& word);
  /// A tensor target: a class with names (activation, parameter, gradient, loss, and optimizer
  /// for a built-in job with optimizer state), then a name in it ("gradient:head.bias",
  /// "optimizer:head.weight.exp_avg_sq", "loss").
  std::string tensor_target();

 private:
  inject::SplitMix64& g_;
  const Scenario& s_;
  const CampaignTargets& t_;
  DrawValues values_;
};

/// The `target` of a drawn fault parsed (nullopt when it has none or it is not a tensor target).
std::optional<Target> drawn_target(const nlohmann::ordered_json& fault);
/// Its where as text ("activation", "loss"; "" without a tensor target): the variant of a
/// tensor-target kind's campaign class.
std::string drawn_target_where(const nlohmann::ordered_json& fault);

/// The ground truth of a fault on a tensor target (`tensor`, `bitflip`): the cause its target
/// class means (activation, gradient, loss -> loss_math, parameter or optimizer state ->
/// parameter) and the layer it names ("loss" for the loss).
KindTruth tensor_target_truth(const nlohmann::ordered_json& fault);

}  // namespace nanchaos::harness
