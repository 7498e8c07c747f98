// Shared workload plumbing: name listings and the factory.
#include <mutex>
#include <stdexcept>

#include "harness/job/workload.h"

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
  static std::mutex construction;
  std::lock_guard<std::mutex> lock(construction);
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

}  // namespace nanchaos::harness
