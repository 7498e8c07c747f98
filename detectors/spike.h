// SpikeWindow: the z-score test shared by `grad_norm_spike` and `loss_spike`.
//
// Keeps the last `window` finite values; a new value x is a spike when at least window/2 values
// are known, z = (x - mean) / std > zscore, and x > 2 x mean. The ratio guard keeps a run whose
// history is almost constant (std near 0) from flagging ordinary noise; a blow-up passes both.
// Rule after the spike detectors of large-scale training stacks (z-score over a trailing window of
// the loss or the global gradient norm). Torch-free.
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>

namespace nanchaos::detect {

class SpikeWindow {
 public:
  SpikeWindow(int64_t window, double zscore) : window_(size_t(window)), zscore_(zscore) {}

  /// Tests x against the history, then (when x is finite and not a spike) adds it.
  /// Returns the z-score when x is a spike, 0 otherwise. Non-finite x is never a spike (the
  /// non-finite checks own it) and is not added.
  double test_and_add(double x) {
    if (!std::isfinite(x)) return 0.0;
    double z = 0.0;
    if (hist_.size() >= std::max<size_t>(2, window_ / 2)) {
      double mean = 0, var = 0;
      for (double v : hist_) mean += v;
      mean /= double(hist_.size());
      for (double v : hist_) var += (v - mean) * (v - mean);
      const double sd = std::sqrt(var / double(hist_.size() - 1));
      const double zz = sd > 0 ? (x - mean) / sd : (x > mean ? INFINITY : 0.0);
      if (zz > zscore_ && x > 2.0 * std::abs(mean)) z = zz;
    }
    if (z == 0.0) {
      hist_.push_back(x);
      if (hist_.size() > window_) hist_.pop_front();
    }
    return z;
  }

 private:
  size_t window_;
  double zscore_;
  std::deque<double> hist_;
};

}  // namespace nanchaos::detect
