// The `transformer` workload: a small GPT-style pre-norm decoder.
#include <cmath>

#include "harness/job/workload.h"
#include "harness/tensor/torch_compat.h"

namespace nanchaos::harness {
namespace {

namespace F = torch::nn::functional;
using torch::nn::Embedding;
using torch::nn::LayerNorm;
using torch::nn::LayerNormOptions;
using torch::nn::Linear;

struct AttnImpl : torch::nn::Module {
  AttnImpl(int64_t d) {
    qkv = register_module("qkv", Linear(d, 3 * d));
    proj = register_module("proj", Linear(d, d));
  }
  Linear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(Attn);

struct FfnImpl : torch::nn::Module {
  FfnImpl(int64_t d) {
    fc1 = register_module("fc1", Linear(d, 4 * d));
    fc2 = register_module("fc2", Linear(4 * d, d));
  }
  Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Ffn);

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t d) {
    ln1 = register_module("ln1", LayerNorm(LayerNormOptions({d})));
    attn = register_module("attn", Attn(d));
    ln2 = register_module("ln2", LayerNorm(LayerNormOptions({d})));
    mlp = register_module("mlp", Ffn(d));
  }
  LayerNorm ln1{nullptr}, ln2{nullptr};
  Attn attn{nullptr};
  Ffn mlp{nullptr};
};
TORCH_MODULE(Block);

struct Gpt : torch::nn::Module {
  Gpt(const WorkloadConfig& c) {
    embed = register_module("embed", Embedding(c.vocab, c.hidden));
    pos = register_module("pos", Embedding(c.seq_len, c.hidden));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c.hidden));
    ln_f = register_module("ln_f", LayerNorm(LayerNormOptions({c.hidden})));
    head = register_module("head", Linear(c.hidden, c.vocab));
  }
  Embedding embed{nullptr}, pos{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  LayerNorm ln_f{nullptr};
  Linear head{nullptr};
};

class Transformer final : public Workload {
 public:
  explicit Transformer(const Scenario& s) : cfg_(s.workload), seed_(s.seed) {
    if (cfg_.hidden % cfg_.heads != 0) {
      throw std::invalid_argument("[workload] hidden must be a multiple of heads");
    }
    torch::manual_seed(s.seed);
    net_ = std::make_shared<Gpt>(cfg_);
    // The hidden rule the model learns: next = (a * token + b) mod vocab.
    mul_ = 5 + 2 * int64_t(s.seed % 7);
    add_ = 3 + int64_t(s.seed % 11);
  }

  torch::nn::Module& module() override { return *net_; }

  Batch make_batch(int64_t step, int rank) override {
    uint64_t stream = seed_ * 1000003ull + uint64_t(rank + 1) * 7777777ull + uint64_t(step) * 31ull;
    auto gen = compat::cpu_generator(stream);
    const int64_t B = cfg_.batch_size, T = cfg_.seq_len, V = cfg_.vocab;
    auto seq = torch::empty({B, T + 1}, torch::kLong);
    seq.select(1, 0).copy_(torch::randint(V, {B}, gen, torch::kLong));
    auto noise = torch::rand({B, T + 1}, gen) < 0.1;
    auto rnd = torch::randint(V, {B, T + 1}, gen, torch::kLong);
    for (int64_t t = 1; t <= T; ++t) {
      auto next = (seq.select(1, t - 1) * mul_ + add_).remainder(V);
      seq.select(1, t).copy_(torch::where(noise.select(1, t), rnd.select(1, t), next));
    }
    Batch b;
    b.inputs = seq.narrow(1, 0, T).contiguous();
    b.labels = seq.narrow(1, 1, T).contiguous();
    b.mask = torch::ones({B, T});
    return b;
  }

  void prepare(Batch&) override {}

  torch::Tensor forward(const Batch& b, const ProbeFn& probe) override {
    const int64_t B = b.inputs.size(0), T = b.inputs.size(1), D = cfg_.hidden, H = cfg_.heads;
    auto tok = probe("embed", net_->embed->forward(b.inputs));
    auto pos =
        probe("pos", net_->pos->forward(torch::arange(T, b.inputs.options().dtype(torch::kLong))));
    auto x = tok + pos;
    auto causal = torch::ones({T, T}, b.inputs.options().dtype(torch::kBool)).triu(1);
    for (size_t i = 0; i < net_->blocks->size(); ++i) {
      auto blk = net_->blocks[i]->as<BlockImpl>();
      const std::string p = "blocks." + std::to_string(i);
      auto h = probe(p + ".ln1", blk->ln1->forward(x));
      auto qkv = probe(p + ".attn.qkv", blk->attn->qkv->forward(h));
      auto parts = qkv.view({B, T, 3, H, D / H}).permute({2, 0, 3, 1, 4});  // 3,B,H,T,dh
      auto q = parts[0], k = parts[1], v = parts[2];
      auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(D / H));
      scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
      auto att = torch::matmul(torch::softmax(scores, -1), v);  // B,H,T,dh
      att = att.transpose(1, 2).reshape({B, T, D});
      auto a = probe(p + ".attn.proj", blk->attn->proj->forward(att));
      a = probe(p + ".attn", a);
      x = x + a;
      h = probe(p + ".ln2", blk->ln2->forward(x));
      auto f = probe(p + ".mlp.fc1", blk->mlp->fc1->forward(h));
      f = probe(p + ".mlp.fc2", blk->mlp->fc2->forward(torch::gelu(f)));
      f = probe(p + ".mlp", f);
      x = probe(p, x + f);
    }
    x = probe("ln_f", net_->ln_f->forward(x));
    return probe("head", net_->head->forward(x));
  }

  torch::Tensor loss(const torch::Tensor& logits, const Batch& b) override {
    auto flat = logits.reshape({-1, cfg_.vocab});
    auto labels = b.labels.reshape({-1});
    torch::Tensor logp;
    if (cfg_.loss == LossKind::kNaiveLogSoftmax) {
      logp = torch::log(torch::softmax(flat, 1));
    } else {
      logp = torch::log_softmax(flat, 1);
    }
    auto nll = -logp.gather(1, labels.unsqueeze(1)).squeeze(1);
    auto mask = b.mask.reshape({-1});
    // Mean over valid target tokens: an all-padding batch divides 0 by 0.
    return (nll * mask).sum() / mask.sum();
  }

  std::vector<std::string> module_names() const override {
    std::vector<std::string> out = {"embed", "pos"};
    for (int64_t i = 0; i < cfg_.layers; ++i) {
      const std::string p = "blocks." + std::to_string(i);
      for (const char* m : {".ln1", ".attn.qkv", ".attn.proj", ".attn", ".ln2", ".mlp.fc1",
                            ".mlp.fc2", ".mlp", ""}) {
        out.push_back(p + m);
      }
    }
    out.push_back("ln_f");
    out.push_back("head");
    return out;
  }

 private:
  WorkloadConfig cfg_;
  uint64_t seed_;
  int64_t mul_, add_;
  std::shared_ptr<Gpt> net_;
};

}  // namespace

std::unique_ptr<Workload> make_transformer(const Scenario& s) {
  return std::make_unique<Transformer>(s);
}

}  // namespace nanchaos::harness
