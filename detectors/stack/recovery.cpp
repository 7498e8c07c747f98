// Recovery state: replica digests, snapshots, resync; see recovery.h.
#include "detectors/stack/recovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "harness/common/digest.h"
#include "harness/tensor/optim_state.h"
#include "harness/tensor/torch_compat.h"

namespace nanchaos::detect {

using harness::Digest;
using harness::LossScaler;

namespace {

torch::optim::OptimizerParamState* state_of(const ModelState& m, const torch::Tensor& p) {
  return compat::optimizer_state(*m.optimizer, p);
}

}  // namespace

PolicyAction choose_action(const harness::RecoveryConfig& pol, bool by_vote) {
  using harness::Policy;
  PolicyAction a;
  a.action = "skip_step";
  if (pol.has(Policy::kAbort)) {
    a.action = "abort";
    a.abort = a.skip = true;
  } else if (pol.has(Policy::kNone)) {
    a.action = "none";
  } else {
    a.skip = true;
    if (pol.has(Policy::kRollback)) {
      a.action = "rollback";
      a.rollback = true;
    }
    if (pol.has(Policy::kResync) && by_vote) {
      a.action = "resync";
      a.resync = true;
    }
    if (pol.has(Policy::kLrBackoff)) {
      a.lr_factor = pol.lr_backoff_factor;  // from this detection on, cumulatively
      a.action += "+lr_backoff";
    }
  }
  return a;
}

int64_t max_step_counter(const ModelState& m) {
  int64_t counter = -1;
  if (!m.optimizer) return counter;
  for (const auto& p : m.params) counter = std::max(counter, harness::state_step(state_of(m, p)));
  return counter;
}

std::vector<uint64_t> replica_digests(const ModelState& m) {
  std::vector<uint64_t> out;
  out.reserve(m.params.size() + m.buffers.size() + 1);
  for (const auto& p : m.params) {
    Digest d;
    harness::digest_tensor(d, p.detach());
    auto* st = state_of(m, p);
    for (auto& [name, t] : harness::state_tensors(st)) harness::digest_tensor(d, t);
    d.add_u64(uint64_t(harness::state_step(st)));
    out.push_back(d.value());
  }
  for (const auto& b : m.buffers) {
    Digest d;
    harness::digest_tensor(d, b);
    out.push_back(d.value());
  }
  // The training state: loss scale, learning-rate factor and every optimizer step counter (also
  // in their parameter's digest), so a drifted counter reads as a state drift, not as every
  // parameter diverging (detectors/core/replica.h classify_divergence).
  Digest t;
  for (const auto& p : m.params) t.add_u64(uint64_t(harness::state_step(state_of(m, p))));
  const double scale = m.scaler ? m.scaler->scale() : 0.0;
  uint64_t bits;
  std::memcpy(&bits, &scale, sizeof bits);
  t.add_u64(bits);
  std::memcpy(&bits, m.lr_scale, sizeof bits);
  t.add_u64(bits);
  out.push_back(t.value());
  return out;
}

Snapshot::Snapshot(int64_t step, const ModelState& m) : step_(step) {
  for (const auto& p : m.params) params_.push_back(p.detach().clone());
  for (const auto& b : m.buffers) buffers_.push_back(b.clone());
  for (const auto& p : m.params) {
    auto* st = state_of(m, p);
    optim_.push_back(st ? harness::deep_clone(*st) : nullptr);
  }
  if (m.scaler) scaler_ = m.scaler->state();
}

Snapshot::~Snapshot() = default;

void Snapshot::restore(const ModelState& m) const {
  torch::NoGradGuard ng;
  for (size_t i = 0; i < m.params.size(); ++i) {
    auto p = m.params[i];
    p.copy_(params_[i]);
  }
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    auto b = m.buffers[i];
    b.copy_(buffers_.at(i));
  }
  for (size_t k = 0; k < m.params.size(); ++k) {
    const auto& st = optim_[k];
    compat::set_optimizer_state(*m.optimizer, m.params[k], st ? harness::deep_clone(*st) : nullptr);
  }
  if (m.scaler && scaler_) m.scaler->restore(*scaler_);
}

std::string resync(const ModelState& m, const harness::ReplicaVote& vote, StackComm& comm,
                   harness::EventLog& log, int64_t step) {
  std::vector<torch::Tensor> tensors;  // in a fixed order, every rank alike
  std::vector<int64_t> steps;
  for (const auto& p : m.params) tensors.push_back(p.detach());
  for (const auto& b : m.buffers) tensors.push_back(b);
  for (const auto& p : m.params) {
    auto* st = state_of(m, p);
    for (auto& [name, t] : harness::state_tensors(st)) tensors.push_back(t);
    steps.push_back(harness::state_step(st));
  }
  const LossScaler::State sc = m.scaler ? m.scaler->state() : LossScaler::State{};
  size_t bytes = 0;
  for (const auto& t : tensors) bytes += size_t(t.nbytes());
  const size_t scalars = steps.size() + 4;  // steps, scale, tracker, just_grew, lr_scale
  const size_t words = (bytes + 7) / 8 + scalars;
  // The layout check: every rank's word count against the source's.
  const auto sizes = comm.allgather_u64({uint64_t(words)}, "resync_layout", step);
  const int src = vote.source;
  for (int r = 0; r < comm.world(); ++r) {
    if (sizes[size_t(r)] != sizes[size_t(src)]) {
      const std::string reason = fmt::format(
          "rank {} holds {} words of state, the source rank {} holds {}: layouts differ", r,
          sizes[size_t(r)], src, sizes[size_t(src)]);
      log.write("resync", {{"step", step}, {"source", src}, {"ok", false}, {"reason", reason}});
      return reason;
    }
  }
  std::vector<int64_t> buf(words, 0);
  if (comm.rank() == src) {
    auto* out = reinterpret_cast<unsigned char*>(buf.data());
    for (const auto& t : tensors) {
      auto c = t.contiguous().cpu();
      std::memcpy(out, c.data_ptr(), c.nbytes());
      out += c.nbytes();
    }
    int64_t* s = buf.data() + (bytes + 7) / 8;
    for (int64_t v : steps) *s++ = v;
    std::memcpy(s++, &sc.scale, sizeof(double));
    *s++ = sc.tracker;
    *s++ = sc.just_grew ? 1 : 0;
    std::memcpy(s, m.lr_scale, sizeof(double));
  }
  comm.allreduce_i64(buf.data(), buf.size(), "resync", step);
  const bool receiver = std::find(vote.minority.begin(), vote.minority.end(),
                                  int64_t(comm.rank())) != vote.minority.end();
  if (receiver) {
    torch::NoGradGuard ng;
    const auto* in = reinterpret_cast<const unsigned char*>(buf.data());
    for (auto& t : tensors) {
      auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU));
      std::memcpy(host.data_ptr(), in, host.nbytes());
      in += host.nbytes();
      t.copy_(host);
    }
    const int64_t* s = buf.data() + (bytes + 7) / 8;
    for (const auto& p : m.params) harness::set_state_step(state_of(m, p), *s++);
    LossScaler::State got{};
    std::memcpy(&got.scale, s++, sizeof(double));
    got.tracker = *s++;
    got.just_grew = *s++ != 0;
    if (m.scaler) m.scaler->restore(got);
    std::memcpy(m.lr_scale, s, sizeof(double));
  }
  log.write("resync", {{"step", step},
                       {"source", src},
                       {"ranks", vote.minority},
                       {"bytes", words * 8},
                       {"ok", true}});
  return "";
}

}  // namespace nanchaos::detect
