// Dynamic loss scaler with torch.cuda.amp.GradScaler's semantics ([recovery] init_scale,
// growth_factor, backoff_factor, growth_interval, plus max_scale/min_scale from the contract).
// LibTorch has no C++ GradScaler, so the stack carries its own.
//
// Rules (PyTorch docs, torch.cuda.amp.GradScaler.update):
//   - found_inf: scale *= backoff_factor, the growth tracker resets, the step is skipped.
//   - otherwise the tracker counts clean steps; after growth_interval of them
//     scale = min(scale * growth_factor, max_scale) and the tracker resets.
// nanchaos additions: an overflow on the first step after a growth is the scaler probing its
// range (reported as `scale_backoff`, not a detection); a backoff below min_scale escalates to an
// abort with cause fp16_overflow. Every rank calls update() with the consensus' found_inf, so the
// scale is identical everywhere. Torch-free; not thread-safe (one per rank).
#pragma once

#include <algorithm>
#include <cstdint>

#include "harness/scenario/stack_config.h"

namespace nanchaos::harness {

class LossScaler {
 public:
  /// The scenario's [recovery] scaler keys (scenario.h ScalerConfig).
  using Config = ScalerConfig;
  enum class Result {
    kClean,     ///< no overflow (the scale may have grown)
    kProbe,     ///< overflow right after a growth: backed off, not a detection
    kOverflow,  ///< overflow: backed off, a detection
    kBelowMin,  ///< overflow and the backed-off scale fell below min_scale: abort
  };

  explicit LossScaler(const Config& c) : c_(c), scale_(c.init_scale) {}
  double scale() const { return scale_; }
  int64_t growth_tracker() const { return tracker_; }
  bool just_grew() const { return just_grew_; }

  /// One optimizer step's update from the agreed found_inf.
  Result update(bool found_inf) {
    const bool probing = just_grew_;
    just_grew_ = false;
    if (found_inf) {
      scale_ *= c_.backoff_factor;
      tracker_ = 0;
      if (scale_ < c_.min_scale) return Result::kBelowMin;
      return probing ? Result::kProbe : Result::kOverflow;
    }
    if (++tracker_ >= c_.growth_interval) {
      tracker_ = 0;
      const double grown = std::min(scale_ * c_.growth_factor, c_.max_scale);
      just_grew_ = grown > scale_;
      scale_ = grown;
    }
    return Result::kClean;
  }

  /// Snapshot/restore for rollback.
  struct State {
    double scale;
    int64_t tracker;
    bool just_grew;
  };
  State state() const { return {scale_, tracker_, just_grew_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    tracker_ = s.tracker;
    just_grew_ = s.just_grew;
  }

 private:
  Config c_;
  double scale_;
  int64_t tracker_ = 0;
  bool just_grew_ = false;
};

}  // namespace nanchaos::harness
