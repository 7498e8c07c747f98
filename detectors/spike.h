// SpikeWindow: the z-score test shared by `grad_norm_spike` and `loss_spike`; ParamNormHistory:
// which parameter's gradient norm rose the most (`grad_norm_spike`'s layer).
//
// Keeps the last `window` finite values; a new value x is a spike when at least window/2 values
// are known, z = (x - mean) / std > zscore, and x > 2 x mean. The ratio guard keeps a run whose
// history is almost constant (std near 0) from flagging ordinary noise; a blow-up passes both.
// Rule after the spike detectors of large-scale training stacks (z-score over a trailing window of
// the loss or the global gradient norm). Torch-free.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

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

/// Per-parameter gradient-norm history for naming the parameter of a spike: for each parameter
/// the mean of its last `window` squared norms (a ring, O(1) per parameter per step; window x
/// parameters doubles). The parameter that "rose the most against its own history" is the one
/// with the largest ratio current / mean of squared norms (the same order as the ratio of
/// norms); a parameter whose history is all zero and whose gradient is now non-zero rises
/// infinitely. Ratios are against the history before the current step.
class ParamNormHistory {
 public:
  explicit ParamNormHistory(int64_t window) : window_(size_t(window)) {}

  /// Index of the parameter whose squared norm `sq[i]` rose the most against its mean, or -1
  /// when no history is known yet, no parameter is non-zero, or the parameter count changed.
  int most_risen(const std::vector<double>& sq) const {
    if (count_ == 0 || sq.size() != sums_.size()) return -1;
    int best = -1;
    double best_ratio = 0;
    for (size_t i = 0; i < sq.size(); ++i) {
      if (!(sq[i] > 0) || !std::isfinite(sq[i])) continue;
      const double mean = sums_[i] / double(count_);
      const double ratio = mean > 0 ? sq[i] / mean : INFINITY;
      if (best < 0 || ratio > best_ratio) {
        best = int(i);
        best_ratio = ratio;
      }
    }
    return best;
  }

  /// Whether a spike is one parameter's, not the model's: parameter `idx` (most_risen's) holds
  /// at least 99 % of the squared norm `sq` and rose at least 100x more against its history than
  /// any other parameter did. A learning-rate or loss-landscape blow-up raises the gradients of
  /// many parameters together; a corrupted gradient element (a flipped exponent bit) raises one.
  bool concentrated(const std::vector<double>& sq, int idx) const {
    if (idx < 0 || size_t(idx) >= sq.size() || count_ == 0 || sq.size() != sums_.size()) {
      return false;
    }
    double total = 0, next_ratio = 0;
    for (size_t i = 0; i < sq.size(); ++i) {
      if (!std::isfinite(sq[i])) return false;
      total += sq[i];
      if (int(i) == idx || !(sq[i] > 0)) continue;
      const double mean = sums_[i] / double(count_);
      next_ratio = std::max(next_ratio, mean > 0 ? sq[i] / mean : INFINITY);
    }
    const double mean = sums_[size_t(idx)] / double(count_);
    const double ratio = mean > 0 ? sq[size_t(idx)] / mean : INFINITY;
    return sq[size_t(idx)] >= 0.99 * total && ratio >= 100.0 * next_ratio;
  }

  /// Adds one step's squared norms (all finite). A different parameter count restarts it.
  void add(const std::vector<double>& sq) {
    if (sq.size() != sums_.size()) {
      sums_.assign(sq.size(), 0.0);
      ring_.assign(sq.size() * window_, 0.0);
      count_ = next_ = 0;
    }
    double* slot = &ring_[next_ * sq.size()];
    for (size_t i = 0; i < sq.size(); ++i) {
      if (count_ == window_) sums_[i] -= slot[i];
      sums_[i] += sq[i];
      slot[i] = sq[i];
    }
    next_ = (next_ + 1) % window_;
    if (count_ < window_) ++count_;
  }

 private:
  size_t window_;
  size_t count_ = 0, next_ = 0;
  std::vector<double> sums_;  // per parameter: sum of the squared norms in the ring
  std::vector<double> ring_;  // window_ rows of one squared norm per parameter
};

}  // namespace nanchaos::detect
