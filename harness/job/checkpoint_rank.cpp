// The built-in job's checkpoints on disk ([checkpoint], SCENARIO_FORMAT.md "Recovery by
// restart"): rank 0 saves before steps every, 2 every, ...; every rank of a (re)launch resumes
// from the newest checkpoint that loads and validates, and reports each one it rejected.
//
// What a checkpoint holds, so that a resumed run is bit-identical to one that never failed:
// parameters and buffers (forward order), the optimizer's state (LibTorch's own serialization:
// Adam/AdamW moments and step counters, SGD momentum), the loss scaler (scale, growth tracker),
// the stack's lr_backoff factor (the LR schedule is a function of the step times that factor),
// the step (the data position: a batch is a function of step and rank) and the CPU generator's
// state. Keys inside the archive are positional ("p0", "b0", ...): LibTorch archives refuse dots
// in names; the manifest (checkpoint_files.h) maps them to the model's names with a digest each
// (harness/common/digest.h, over the tensors as loaded back, so that a flipped bit anywhere
// in the archive that reaches the state is seen).
//
// Events: `ckpt_save {path, step}` after the manifest is in place (rank 0); `ckpt_load {path,
// step}` when a launch resumed; for a rejected checkpoint `detect` and a local `decision`
// (detector "checkpoint", cause checkpoint_corruption, layer = the first bad tensor or "" when
// the file does not load, action "checkpoint_fallback"), at the rejected checkpoint's step.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "harness/common/cause.h"
#include "harness/common/digest.h"
#include "harness/evidence/event_types.h"
#include "harness/job/checkpoint_files.h"
#include "harness/job/rank_runner.h"
#include "harness/tensor/optim_state.h"

namespace nanchaos::harness {

namespace fs = std::filesystem;

namespace {

std::string digest_of(const torch::Tensor& t) {
  Digest d;
  digest_tensor(d, t);
  return d.hex();
}

torch::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_rng_state(const torch::Tensor& st) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(st);
}

// The layer a rejection names, as the stack names layers: "head.weight" for
// parameter:head.weight and buffer:..., "head.weight.exp_avg" for optimizer:head.weight.exp_avg;
// the loop's own state keeps its prefix ("scaler:scale", "rng:cpu").
std::string tensor_layer(const std::string& name) {
  for (const char* prefix : {"parameter:", "buffer:", "optimizer:"}) {
    if (name.rfind(prefix, 0) == 0) return name.substr(std::strlen(prefix));
  }
  return name;
}

}  // namespace

/// Every tensor of the training state by name, in a fixed order (the manifest's): parameters,
/// buffers, optimizer state per parameter (PARAM.exp_avg, ..., PARAM.step as a tensor), then
/// the scalars.
std::vector<std::pair<std::string, torch::Tensor>> RankRunner::training_state_tensors() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < fwd_params_.size(); ++i) {
    out.emplace_back("parameter:" + fwd_names_[i], fwd_params_[i].detach());
  }
  for (auto& [name, b] : workload_->buffers()) out.emplace_back("buffer:" + name, b);
  for (size_t i = 0; i < fwd_params_.size(); ++i) {
    auto* st = compat::optimizer_state(*opt_, fwd_params_[i]);
    for (auto& [name, t] : state_tensors(st)) {
      out.emplace_back("optimizer:" + fwd_names_[i] + "." + name, t);
    }
    if (const int64_t step = state_step(st); step >= 0) {
      out.emplace_back("optimizer:" + fwd_names_[i] + ".step", torch::tensor(step));
    }
  }
  const detect::StackState stack = stack_->checkpoint();
  if (stack.scaler) {
    out.emplace_back("scaler:scale", torch::tensor(stack.scaler->scale, torch::kFloat64));
    out.emplace_back("scaler:tracker", torch::tensor(stack.scaler->tracker));
  }
  out.emplace_back("schedule:lr_scale", torch::tensor(stack.carry.lr_scale, torch::kFloat64));
  out.emplace_back("rng:cpu", cpu_rng_state());
  return out;
}

void RankRunner::save_checkpoint(int64_t step) {
  if (rank_ != 0) return;  // format "torch": one file, the replicas are identical
  const fs::path dir = checkpoint_dir(run_dir_);
  fs::create_directories(dir);
  torch::serialize::OutputArchive ar;
  nlohmann::json tensors = nlohmann::json::array();
  const auto state = training_state_tensors();
  for (size_t i = 0; i < state.size(); ++i) {
    const auto& [name, t] = state[i];
    const std::string key = fmt::format("t{}", i);
    ar.write(key, t.detach().cpu().contiguous(), /*is_buffer=*/true);
    tensors.push_back({{"name", name}, {"key", key}, {"digest", digest_of(t)}});
  }
  torch::serialize::OutputArchive optimizer;
  opt_->save(optimizer);
  ar.write("optimizer", optimizer);
  std::ostringstream bytes;
  ar.save_to(bytes);
  const fs::path archive = checkpoint_archive(dir, step);
  write_file_atomic(archive, bytes.str());
  const nlohmann::json manifest = {{"format", "torch"},
                                   {"step", step},
                                   {"world", world_},
                                   {"file", archive.filename().string()},
                                   {"tensors", tensors}};
  write_file_atomic(checkpoint_manifest(dir, step), manifest.dump(1));
  log_->write("ckpt_save", {{"path", archive.string()},
                            {"step", step},
                            {"agent_step", step},
                            {"tensors", tensors.size()}});
  // The `checkpoint` fault kind acts on the files now, before any load (and before pruning).
  inject::CheckpointWritten written;
  written.save = step / s_.checkpoint.every;
  written.archive = archive.string();
  for (const int64_t earlier : checkpoint_steps(dir)) {
    if (earlier < step) {
      written.previous_archive = checkpoint_archive(dir, earlier).string();
      break;
    }
  }
  written.tensors = state;
  faults_->begin_step(step, /*reexecution=*/false);
  faults_->checkpoint_saved(written);
  prune_checkpoints(dir, s_.checkpoint.keep);
}

/// Loads the checkpoint at `step` into the live state; returns why it is rejected (nullopt: it
/// loaded and, with validate, every digest matched and every tensor is finite). The live state
/// is unspecified after a rejection (the caller restores it).
std::optional<RankRunner::CheckpointRejection> RankRunner::load_checkpoint(const fs::path& dir,
                                                                           int64_t step) {
  nlohmann::json manifest;
  try {
    std::ifstream in(checkpoint_manifest(dir, step));
    manifest = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return CheckpointRejection{"", std::string("unreadable manifest: ") + e.what()};
  }
  const auto& entries = manifest.value("tensors", nlohmann::json::array());
  torch::serialize::InputArchive ar;
  std::vector<torch::Tensor> loaded;
  try {
    ar.load_from(checkpoint_archive(dir, step).string());
    torch::serialize::InputArchive optimizer;
    ar.read("optimizer", optimizer);
    opt_->load(optimizer);
    for (const auto& e : entries) {
      torch::Tensor t;
      ar.read(e.at("key").get<std::string>(), t, /*is_buffer=*/true);
      loaded.push_back(t);
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    return CheckpointRejection{"", "does not load: " + what.substr(0, what.find('\n'))};
  }
  // The archive's tensors into the live model (the optimizer state is live already).
  auto live = training_state_tensors();
  if (live.size() != entries.size()) {
    return CheckpointRejection{
        "", fmt::format("holds {} tensors, the job has {}", entries.size(), live.size())};
  }
  std::optional<detect::StackState> stack;
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < live.size(); ++i) {
      const std::string& name = live[i].first;
      if (entries[i].value("name", "") != name) {
        return CheckpointRejection{tensor_layer(name),
                                   "holds " + entries[i].value("name", "") + " in its place"};
      }
      if (name.rfind("parameter:", 0) == 0 || name.rfind("buffer:", 0) == 0) {
        live[i].second.copy_(loaded[i]);
      } else if (name == "rng:cpu") {
        set_cpu_rng_state(loaded[i]);
      } else if (name.rfind("scaler:", 0) == 0 || name == "schedule:lr_scale") {
        if (!stack) stack = stack_->checkpoint();
        if (name == "scaler:scale" && stack->scaler)
          stack->scaler->scale = loaded[i].item<double>();
        if (name == "scaler:tracker" && stack->scaler) {
          stack->scaler->tracker = loaded[i].item<int64_t>();
        }
        if (name == "schedule:lr_scale") stack->carry.lr_scale = loaded[i].item<double>();
      }
    }
  }
  if (stack) stack_->restore(*stack);
  if (!s_.checkpoint.validate) return std::nullopt;
  // Validate what the job now holds: a digest per tensor, then finiteness of the training state.
  live = training_state_tensors();
  for (size_t i = 0; i < live.size(); ++i) {
    if (digest_of(live[i].second) != entries[i].value("digest", "")) {
      return CheckpointRejection{tensor_layer(live[i].first), "digest mismatch"};
    }
  }
  for (const auto& [name, t] : live) {
    if (name == "rng:cpu" || !t.is_floating_point()) continue;
    if (!torch::isfinite(t).all().item<bool>()) {
      return CheckpointRejection{tensor_layer(name), "not finite"};
    }
  }
  return std::nullopt;
}

int64_t RankRunner::resume() {
  const fs::path dir = checkpoint_dir(run_dir_);
  const std::vector<int64_t> steps = checkpoint_steps(dir);
  if (steps.empty()) return 0;
  // The state as built, to fall back on when no checkpoint is good.
  const detect::Snapshot fresh(0, model_state());
  const detect::StackState fresh_stack = stack_->checkpoint();
  const torch::Tensor fresh_rng = cpu_rng_state();
  for (const int64_t step : steps) {
    const auto rejected = load_checkpoint(dir, step);
    if (!rejected) {
      log_->write("ckpt_load", {{"path", checkpoint_archive(dir, step).string()},
                                {"step", step},
                                {"validated", s_.checkpoint.validate}});
      return step;
    }
    const std::string cause = to_string(Cause::kCheckpointCorruption);
    write_event(
        *log_,
        DetectEvent{
            .detector = "checkpoint", .step = step, .layer = rejected->layer, .cause = cause});
    DecisionEvent dec;
    dec.step = step;
    dec.detector = "checkpoint";
    dec.ranks = {rank_};
    dec.layer = rejected->layer;
    dec.cause = cause;
    dec.action = "checkpoint_fallback";
    dec.local = true;
    write_event(*log_, dec);
    log_->write("ckpt_reject", {{"path", checkpoint_archive(dir, step).string()},
                                {"step", step},
                                {"layer", rejected->layer},
                                {"why", rejected->why}});
    fresh.restore(model_state());
    stack_->restore(fresh_stack);
    set_cpu_rng_state(fresh_rng);
  }
  return 0;
}

}  // namespace nanchaos::harness
