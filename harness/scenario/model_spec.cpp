// The built-in workloads' names and shapes, mirrored from workload_mlp.cpp and
// workload_transformer.cpp (LibTorch's Linear(in, out) has weight [out, in] and bias [out];
// Embedding(n, d) weight [n, d]; LayerNorm({d}) and BatchNorm1d(d) weight and bias [d]; BatchNorm1d
// buffers running_mean, running_var [d] and num_batches_tracked []). model_spec_test.cpp checks
// the mirror against the real modules.
#include "harness/scenario/model_spec.h"

#include <stdexcept>

namespace nanchaos::harness {

double TensorShape::numel() const {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

namespace {

void linear(ModelSpec& m, const std::string& prefix, int64_t in, int64_t out) {
  m.parameters.push_back({prefix + ".weight", {out, in}});
  m.parameters.push_back({prefix + ".bias", {out}});
}

void affine_norm(ModelSpec& m, const std::string& prefix, int64_t d) {
  m.parameters.push_back({prefix + ".weight", {d}});
  m.parameters.push_back({prefix + ".bias", {d}});
}

ModelSpec mlp(const WorkloadConfig& w) {
  ModelSpec m;
  int64_t in = w.features;
  for (int64_t i = 0; i < w.layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    m.modules.push_back(p + ".linear");
    linear(m, p + ".linear", in, w.hidden);
    if (w.norm != Norm::kNone) {
      m.modules.push_back(p + ".norm");
      affine_norm(m, p + ".norm", w.hidden);
    }
    if (w.norm == Norm::kBatchNorm) {
      m.buffers.push_back({p + ".norm.running_mean", {w.hidden}});
      m.buffers.push_back({p + ".norm.running_var", {w.hidden}});
      m.buffers.push_back({p + ".norm.num_batches_tracked", {}});
    }
    m.modules.push_back(p);
    in = w.hidden;
  }
  m.modules.push_back("head");
  linear(m, "head", in, w.classes);
  return m;
}

ModelSpec transformer(const WorkloadConfig& w) {
  const int64_t d = w.hidden;
  ModelSpec m;
  m.modules = {"embed", "pos"};
  m.parameters.push_back({"embed.weight", {w.vocab, d}});
  m.parameters.push_back({"pos.weight", {w.seq_len, d}});
  for (int64_t i = 0; i < w.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i);
    for (const char* sub :
         {".ln1", ".attn.qkv", ".attn.proj", ".attn", ".ln2", ".mlp.fc1", ".mlp.fc2", ".mlp", ""}) {
      m.modules.push_back(p + sub);
    }
    affine_norm(m, p + ".ln1", d);
    linear(m, p + ".attn.qkv", d, 3 * d);
    linear(m, p + ".attn.proj", d, d);
    affine_norm(m, p + ".ln2", d);
    linear(m, p + ".mlp.fc1", d, 4 * d);
    linear(m, p + ".mlp.fc2", 4 * d, d);
  }
  m.modules.push_back("ln_f");
  affine_norm(m, "ln_f", d);
  m.modules.push_back("head");
  linear(m, "head", d, w.vocab);
  return m;
}

}  // namespace

ModelSpec builtin_model(WorkloadKind workload, const WorkloadConfig& w) {
  switch (workload) {
    case WorkloadKind::kMlp:
      return mlp(w);
    case WorkloadKind::kTransformer:
      return transformer(w);
    case WorkloadKind::kExternal:
      break;
  }
  throw std::logic_error("builtin_model: an external job has no built-in model");
}

std::optional<ModelSpec> listed_model(const Scenario& s) {
  if (s.job.external() || s.workload.layers > kMaxListedLayers) return std::nullopt;
  return builtin_model(s.job.workload, s.workload);
}

const char* workload_name(WorkloadKind workload) {
  switch (workload) {
    case WorkloadKind::kMlp:
      return "mlp";
    case WorkloadKind::kTransformer:
      return "transformer";
    case WorkloadKind::kExternal:
      return "external";
  }
  return "?";
}

}  // namespace nanchaos::harness
