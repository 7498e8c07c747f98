// Shared workload plumbing: name listings, the factory, the optimizer and the LR schedule.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

#include "harness/job/workload.h"
#include "harness/tensor/torch_compat.h"

namespace nanchaos::harness {

std::unique_ptr<Workload> make_mlp(const Scenario& s);
std::unique_ptr<Workload> make_transformer(const Scenario& s);

std::vector<std::pair<std::string, torch::Tensor>> Workload::parameters() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : module().named_parameters(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> Workload::buffers() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : module().named_buffers(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::unique_ptr<Workload> make_workload(const Scenario& s) {
  // Each workload seeds LibTorch's process-wide generator and draws its initial weights from it.
  // Ranks that share a process (an in-process world, harness/comm/in_process.h) build their
  // models one at a time, so every rank starts from the seed's weights, as separate processes do.
  std::lock_guard<std::mutex> lock(compat::default_generator_mutex());
  switch (s.job.workload) {
    case WorkloadKind::kMlp:
      return make_mlp(s);
    case WorkloadKind::kTransformer:
      return make_transformer(s);
    case WorkloadKind::kExternal:
      throw std::logic_error("an external job brings its own model (no built-in workload)");
  }
  throw std::logic_error("unknown workload");
}

TargetList list_targets(const Scenario& s) {
  auto w = make_workload(s);
  TargetList t;
  t.modules = w->module_names();
  for (auto& [name, p] : w->parameters()) t.parameters.push_back(name);
  return t;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                        const WorkloadConfig& w) {
  switch (w.optimizer) {
    case Optimizer::kSgd:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(w.lr));
    case Optimizer::kAdam:
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(w.lr));
    case Optimizer::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(w.lr).weight_decay(0.01));
  }
  throw std::logic_error("make_optimizer: unknown optimizer");
}

double scheduled_lr(const Scenario& s, int64_t step) {
  const auto& w = s.workload;
  if (w.warmup_steps > 0 && step < w.warmup_steps) {
    return w.lr * double(step + 1) / double(w.warmup_steps);
  }
  if (w.schedule == Schedule::kCosine) {
    const double span = double(std::max<int64_t>(1, s.job.steps - w.warmup_steps));
    const double progress = double(step - w.warmup_steps) / span;
    return w.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return w.lr;
}

void to_device(Batch& b, torch::Device device) {
  if (device.is_cpu()) return;
  b.inputs = b.inputs.to(device);
  b.labels = b.labels.to(device);
  if (b.mask.defined()) b.mask = b.mask.to(device);
}

double eval_loss(Workload& w, torch::Device device) {
  torch::NoGradGuard ng;
  w.module().eval();
  Batch b = w.make_batch(0, -1);
  to_device(b, device);
  w.prepare(b);
  ProbeFn identity = [](const std::string&, torch::Tensor t) { return t; };
  const double l = w.loss(w.forward(b, identity), b).item<double>();
  w.module().train();
  return l;
}

void broadcast_buffers(Workload& w, int rank, int world, const AllReduceFloats& sum) {
  std::vector<torch::Tensor> floats;
  for (auto& [name, b] : w.buffers()) {
    if (b.is_floating_point()) floats.push_back(b);
  }
  if (floats.empty() || world == 1) return;
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> flat_parts;
  for (auto& b : floats) flat_parts.push_back(b.reshape({-1}));
  auto flat = torch::cat(flat_parts);
  if (rank != 0) flat.zero_();
  sum(flat.data_ptr<float>(), size_t(flat.numel()));
  int64_t off = 0;
  for (auto& b : floats) {
    b.copy_(flat.narrow(0, off, b.numel()).view_as(b));
    off += b.numel();
  }
}

std::vector<torch::Tensor> clone_buffers(Workload& w) {
  std::vector<torch::Tensor> copy;
  for (auto& [name, b] : w.buffers()) copy.push_back(b.clone());
  return copy;
}

void restore_buffers(Workload& w, const std::vector<torch::Tensor>& copy) {
  torch::NoGradGuard ng;
  size_t i = 0;
  for (auto& [name, b] : w.buffers()) b.copy_(copy.at(i++));
}

}  // namespace nanchaos::harness
