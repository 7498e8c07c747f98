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

#include "harness/common/rng.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/target.h"

namespace nanchaos::harness {

class FaultDraw {
 public:
  /// `g`, `s` and `t` must outlive this object.
  FaultDraw(inject::SplitMix64& g, const Scenario& s, const CampaignTargets& t)
      : g_(g), s_(s), t_(t) {}

  const Scenario& scenario() const { return s_; }
  const CampaignTargets& targets() const { return t_; }

  /// An integer in [0, n), n >= 1.
  uint64_t below(uint64_t n) { return g_.below(n); }
  /// One of `items` (not empty), uniformly.
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items.at(size_t(g_.below(items.size())));
  }

  /// A value a fault writes: "nan", "inf", "-inf" or 1e30 (a large finite number), uniformly.
  nlohmann::ordered_json value();
  /// A bit of a word of `bits` (16 or 32) bits: half the time the top exponent bit (the flip that
  /// turns a weight into a huge number), else any bit (most flips of low mantissa bits are masked).
  int64_t bit(int bits);
  /// A tensor target: a class with names (activation, parameter, gradient, loss, and optimizer
  /// for a built-in job with optimizer state), then a name in it ("gradient:head.bias",
  /// "optimizer:head.weight.exp_avg_sq", "loss").
  std::string tensor_target();

 private:
  inject::SplitMix64& g_;
  const Scenario& s_;
  const CampaignTargets& t_;
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
