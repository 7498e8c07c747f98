// The `mlp` workload: layers.I = Linear -> norm -> GELU, then `head`.
#include <cmath>

#include "harness/job/workload.h"
#include "harness/tensor/torch_compat.h"

namespace nanchaos::harness {
namespace {

namespace F = torch::nn::functional;

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t in, int64_t out, Norm norm) : norm_kind(norm) {
    linear = register_module("linear", torch::nn::Linear(in, out));
    if (norm == Norm::kBatchNorm) {
      bn = register_module("norm", torch::nn::BatchNorm1d(out));
    } else if (norm == Norm::kLayerNorm) {
      ln = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({out})));
    }
  }
  Norm norm_kind;
  torch::nn::Linear linear{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(Block);

struct MlpNet : torch::nn::Module {
  MlpNet(const WorkloadConfig& c) {
    layers = register_module("layers", torch::nn::ModuleList());
    int64_t in = c.features;
    for (int64_t i = 0; i < c.layers; ++i) {
      layers->push_back(Block(in, c.hidden, c.norm));
      in = c.hidden;
    }
    head = register_module("head", torch::nn::Linear(in, c.classes));
  }
  torch::nn::ModuleList layers{nullptr};
  torch::nn::Linear head{nullptr};
};

class Mlp final : public Workload {
 public:
  explicit Mlp(const Scenario& s) : cfg_(s.workload), seed_(s.seed) {
    torch::manual_seed(s.seed);
    net_ = std::make_shared<MlpNet>(cfg_);
    auto gen = compat::cpu_generator(s.seed * 7919 + 17);
    teacher_ = torch::randn({cfg_.features, cfg_.classes}, gen) / std::sqrt(double(cfg_.features));
  }

  torch::nn::Module& module() override { return *net_; }

  Batch make_batch(int64_t step, int rank) override {
    // Distinct stream per (seed, rank, step); rank -1 is the held-out batch.
    uint64_t stream = seed_ * 1000003ull + uint64_t(rank + 1) * 7777777ull + uint64_t(step) * 31ull;
    auto gen = compat::cpu_generator(stream);
    Batch b;
    b.inputs = torch::randn({cfg_.batch_size, cfg_.features}, gen);
    auto scores = torch::matmul(b.inputs, teacher_);
    if (regression()) {
      b.labels = torch::tanh(scores);
    } else {
      b.labels = scores.argmax(1);
    }
    return b;
  }

  void prepare(Batch& b) override {
    if (!cfg_.normalize_inputs) return;
    auto mean = b.inputs.mean(0, /*keepdim=*/true);
    auto std = b.inputs.std(0, /*unbiased=*/true, /*keepdim=*/true);
    b.inputs = (b.inputs - mean) / std;  // no epsilon: the classic 0/0 on a constant column
  }

  torch::Tensor forward(const Batch& b, const ProbeFn& probe) override {
    auto x = b.inputs;
    for (size_t i = 0; i < net_->layers->size(); ++i) {
      auto blk = net_->layers[i]->as<BlockImpl>();
      std::string prefix = "layers." + std::to_string(i);
      x = probe(prefix + ".linear", blk->linear->forward(x));
      if (blk->bn) x = probe(prefix + ".norm", blk->bn->forward(x));
      if (blk->ln) x = probe(prefix + ".norm", blk->ln->forward(x));
      x = probe(prefix, torch::gelu(x));
    }
    return probe("head", net_->head->forward(x));
  }

  torch::Tensor loss(const torch::Tensor& logits, const Batch& b) override {
    switch (cfg_.loss) {
      case LossKind::kCrossEntropy:
        return F::cross_entropy(logits, b.labels);
      case LossKind::kNaiveLogSoftmax:
        // log(softmax(x)) in two steps: softmax underflows to 0 on extreme logits -> log(0).
        return F::nll_loss(torch::log(torch::softmax(logits, 1)), b.labels);
      case LossKind::kMse:
        return F::mse_loss(logits, b.labels);
      case LossKind::kMaskedMse: {
        // The classic mistake: mask non-finite targets AFTER the element-wise loss. The loss
        // stays finite; backward multiplies the zero mask gradient by NaN.
        auto el = (logits - b.labels).pow(2);
        auto keep = torch::isfinite(b.labels);
        auto kept = torch::where(keep, el, torch::zeros_like(el));
        return kept.sum() / keep.sum().clamp_min(1);
      }
    }
    throw std::logic_error("unknown loss");
  }

  std::vector<std::string> module_names() const override {
    std::vector<std::string> out;
    for (int64_t i = 0; i < cfg_.layers; ++i) {
      std::string p = "layers." + std::to_string(i);
      out.push_back(p + ".linear");
      if (cfg_.norm != Norm::kNone) out.push_back(p + ".norm");
      out.push_back(p);
    }
    out.push_back("head");
    return out;
  }

 private:
  bool regression() const {
    return cfg_.loss == LossKind::kMse || cfg_.loss == LossKind::kMaskedMse;
  }
  WorkloadConfig cfg_;
  uint64_t seed_;
  std::shared_ptr<MlpNet> net_;
  torch::Tensor teacher_;
};

}  // namespace

std::unique_ptr<Workload> make_mlp(const Scenario& s) { return std::make_unique<Mlp>(s); }

}  // namespace nanchaos::harness
