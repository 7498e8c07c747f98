// The replay's checks and the probe sums (replay.h).
#include "detectors/stack/replay.h"

#include <algorithm>
#include <cmath>

#include "harness/scenario/detector_registry.h"

namespace nanchaos::detect {

void ProbeSums::clear() {
  names_.clear();
  pre_.clear();
  post_.clear();
  half_typed_.clear();
}

void ProbeSums::add(const std::string& module, const torch::Tensor& out, bool rounded) {
  torch::NoGradGuard ng;
  auto s = out.detach().sum(torch::kFloat);
  if (rounded) {
    post_.push_back(std::move(s));
    return;
  }
  names_.push_back(module);
  pre_.push_back(std::move(s));
  half_typed_.push_back(out.scalar_type() == torch::kHalf || out.scalar_type() == torch::kBFloat16);
}

ProbeSums::First ProbeSums::first_nonfinite(const std::vector<std::string>& modules) const {
  First first;
  if (pre_.empty()) return first;
  const auto pre = torch::stack(pre_).cpu();
  const auto post = post_.size() == pre_.size() ? torch::stack(post_).cpu() : torch::Tensor();
  const float* a = pre.data_ptr<float>();
  const float* b = post.defined() ? post.data_ptr<float>() : nullptr;
  for (size_t i = 0; i < names_.size(); ++i) {
    const bool bad_pre = !std::isfinite(a[i]);
    const bool bad_post = b != nullptr && !std::isfinite(b[i]);
    if (!bad_pre && !bad_post) continue;
    const auto it = std::find(modules.begin(), modules.end(), names_[i]);
    if (it == modules.end()) return first;
    first.module = int(it - modules.begin());
    // Non-finite only after the CPU path's rounding: the half range was left here. Non-finite
    // before it: an overflow only where the module itself computed in the half type.
    first.overflow = bad_pre ? half_typed_[i] && std::isinf(a[i]) : true;
    return first;
  }
  return first;
}

ReplayChecks::ReplayChecks(const harness::StackConfig& s) {
  for (const auto& name : harness::detector_order()) {
    const auto& info = harness::detectors().at(name);
    if (info.replay && info.make) detectors_.push_back(info.make(s));
  }
}

void ReplayChecks::begin() {
  findings_.clear();
  probes_.clear();
  for (auto& d : detectors_) d->reset();
  anomaly_.emplace();
}

void ReplayChecks::note_output(const std::string& module, const torch::Tensor& out, bool rounded) {
  probes_.add(module, out, rounded);
}

void ReplayChecks::check(Hook hook, const StepView& view) {
  for (auto& d : detectors_) {
    if (d->hook() != hook) continue;
    if (auto finding = d->check(view)) findings_.emplace(d->name(), *finding);
  }
}

void ReplayChecks::on_activation(const std::string& module, const torch::Tensor& out) {
  for (auto& d : detectors_) d->on_activation(module, out);
}

ReplayResult ReplayChecks::end(const std::vector<std::string>& modules) {
  anomaly_.reset();
  const ProbeSums::First first = probes_.first_nonfinite(modules);
  ReplayResult r;
  r.reproduced = !findings_.empty();
  // A finding's code means what its registered consensus column means (consensus.h).
  for (const auto& [name, finding] : findings_) {
    const int column = harness::detectors().at(name).column;
    if (column == harness::kModuleIdx) r.first_module = finding.code;
    if (column == harness::kGradIdx) r.first_grad = finding.code;
    if (column == harness::kParamIdx) r.first_param = finding.code;
  }
  r.overflow = r.first_module >= 0 && first.module == r.first_module && first.overflow;
  for (const auto& d : detectors_) {
    auto it = findings_.find(d->name());
    if (d->wants_anomaly_mode() && it != findings_.end()) r.anomaly_op = it->second.layer;
  }
  return r;
}

}  // namespace nanchaos::detect
