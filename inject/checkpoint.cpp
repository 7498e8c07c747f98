// Fault kind `checkpoint`: corrupts a checkpoint the job wrote, after the save and before any load
// (SCENARIO_FORMAT.md "Recovery by restart"): the built-in job's ([checkpoint]) here, an external
// job's own files in the Python agent (inject/python/nanchaos/faults/checkpoint.py, after the
// torch.save it observed). It matters only when a later launch loads that checkpoint: combine it
// with a `crash` or `hang` after the save and `[job] restarts`.
//
// Which save: `save = N` (1-based; built-in: the save made before step N x every; external: the
// rank's N-th training-state save of the launch) or `step` (the save made before that step;
// external: the save whose step, as the job's object records it, is `step`). Modes:
//   nan / inf / bitflip - one element of `target`'s tensor in the archive (the first tensor, a
//                         parameter, when no target): the bytes of the tensor as saved are found
//                         in the file and its first element is rewritten in place (bitflip:
//                         `bit`, default 30, of that float32)
//   truncate            - the archive cut to half its size
//   delete              - the archive removed
//   stale               - the archive replaced by the previous save's, under the new name
// Format "dcp" ([checkpoint] format, harness/job/checkpoint_files.h): every rank is handed its own
// shard, and `ranks` picks the shards the fault acts on (default [0]); each mode acts on the
// shard file as above (stale: the same rank's shard of the previous save). nan / inf / bitflip
// with a `target` hit it in the shard that holds it (the job splits the state round-robin over
// the ranks): that rank must be in `ranks`, else the fault stops the rank with an error naming
// the rank to give; without a target, the first float32 parameter of each picked shard.
// Ground truth: cause checkpoint_corruption, layer = the target's name (head.weight for
// parameter:head.weight; none for truncate/delete/stale, whose first bad tensor the fault does
// not choose), rank = the shard's (dcp; format "torch": none).
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>

#include "harness/scenario/fault_draw.h"
#include "harness/scenario/registry.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/scenario_schema.h"
#include "inject/injector.h"

namespace nanchaos::inject {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("fault checkpoint: cannot read " + path);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("fault checkpoint: cannot write " + path);
}

class CheckpointInjector final : public Injector {
 public:
  explicit CheckpointInjector(const harness::FaultSpec& f, int64_t every)
      : Injector(f),
        save_(f.step / every),
        mode_(f.params.get_string("mode")),
        target_(f.target ? f.target->text() : ""),
        bit_(int(f.params.get_int("bit"))) {}

  void on_checkpoint_saved(FaultContext& ctx, const CheckpointWritten& w) override {
    if (w.save != save_ || !spec_.ranks.contains(ctx.rank)) return;
    if (ctx.reexecution && !spec_.persistent) return;
    const bool into_tensor = mode_ == "nan" || mode_ == "inf" || mode_ == "bitflip";
    if (w.shard >= 0 && into_tensor && !target_.empty() && !holds_target(w)) return;
    if (mode_ == "truncate") {
      const auto size = fs::file_size(w.archive);
      fs::resize_file(w.archive, size / 2);
      ctx.fired(spec_.index, "",
                with_shard(w, {{"mode", mode_}, {"bytes", size}, {"kept", size / 2}}));
    } else if (mode_ == "delete") {
      fs::remove(w.archive);
      ctx.fired(spec_.index, "", with_shard(w, {{"mode", mode_}}));
    } else if (mode_ == "stale") {
      if (w.previous_archive.empty() || !fs::exists(w.previous_archive)) {
        throw std::runtime_error(fmt::format(
            "fault checkpoint: mode \"stale\" on save {} needs an earlier save on disk", w.save));
      }
      fs::copy_file(w.previous_archive, w.archive, fs::copy_options::overwrite_existing);
      ctx.fired(spec_.index, "", with_shard(w, {{"mode", mode_}, {"from", w.previous_archive}}));
    } else {
      corrupt_tensor(ctx, w);
    }
  }

 private:
  // Format "dcp": whether this rank's shard holds the target; false when another rank in
  // `ranks` holds it (that rank corrupts it), an error when no rank in `ranks` does.
  bool holds_target(const CheckpointWritten& w) const {
    for (const auto& [name, owner] : w.owners) {
      if (name != target_) continue;
      if (owner == w.shard) return true;
      if (owner >= 0 && spec_.ranks.contains(owner)) return false;
      throw std::runtime_error(fmt::format(
          "fault checkpoint: {} is in rank {}'s shard of the dcp checkpoint (save {}), not in "
          "a shard of `ranks`; give ranks = [{}]",
          target_, owner, w.save, owner));
    }
    throw std::runtime_error("fault checkpoint: no tensor " + target_ + " in the checkpoint");
  }

  // Rewrites the first element of the target tensor where its saved bytes lie in the archive.
  void corrupt_tensor(FaultContext& ctx, const CheckpointWritten& w) {
    const std::pair<std::string, torch::Tensor>* hit = nullptr;
    for (const auto& named : w.tensors) {
      const bool wanted =
          target_.empty() ? named.first.rfind("parameter:", 0) == 0 : named.first == target_;
      if (wanted && named.second.scalar_type() == torch::kFloat32) {
        hit = &named;
        break;
      }
    }
    if (hit == nullptr) {
      throw std::runtime_error(
          "fault checkpoint: no float32 tensor " +
          (target_.empty() ? std::string("parameter") : target_) + " in the checkpoint" +
          (w.shard >= 0 ? fmt::format(" (rank {}'s dcp shard)", w.shard) : std::string()));
    }
    const torch::Tensor t = hit->second.detach().cpu().contiguous();
    const std::string needle(static_cast<const char*>(t.data_ptr()), size_t(t.nbytes()));
    std::string bytes = read_file(w.archive);
    const size_t at = bytes.find(needle);
    if (at == std::string::npos) {
      throw std::runtime_error("fault checkpoint: the bytes of " + hit->first + " are not in " +
                               w.archive);
    }
    float v;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    const float before = v;
    if (mode_ == "nan") {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (mode_ == "inf") {
      v = std::numeric_limits<float>::infinity();
    } else {
      uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      u ^= uint32_t(1) << bit_;
      std::memcpy(&v, &u, sizeof v);
    }
    std::memcpy(bytes.data() + at, &v, sizeof v);
    write_file(w.archive, bytes);
    ctx.fired(spec_.index, hit->first,
              with_shard(w, {{"mode", mode_},
                             {"before", fmt::format("{}", before)},
                             {"after", fmt::format("{}", v)}}));
  }

  // The firing's detail, with the file it acted on when that is a dcp shard.
  static nlohmann::json with_shard(const CheckpointWritten& w, nlohmann::json detail) {
    if (w.shard >= 0) {
      detail["shard"] = w.shard;
      detail["file"] = fs::path(w.archive).filename().string();
    }
    return detail;
  }

  int64_t save_;
  std::string mode_;
  std::string target_;
  int bit_;
};

using harness::FaultKindInfo;
using harness::Key;
using harness::KeyType;

FaultKindInfo checkpoint_kind() {
  FaultKindInfo info;
  info.name = "checkpoint";
  info.doc =
      "corrupts a checkpoint the job wrote (built-in: [checkpoint]; external: the agent's "
      "observed torch.save, or its rank's shard of an observed torch.distributed.checkpoint "
      "save), after the save and before any load";
  info.keys = {
      Key("step", KeyType::kInt,
          "the save made before this step (built-in: a multiple of [checkpoint].every; "
          "external: the step the job's save records); exactly one of `step` and `save` is "
          "required (no save is made before step 0)")
          .def(0)
          .min(0),
      Key("save", KeyType::kInt,
          "which save, 1-based (built-in: the one before step save x every; external: the "
          "rank's N-th save of training state)")
          .min(1),
      Key("mode", KeyType::kString,
          "nan / inf / bitflip: one element of `target`'s tensor; truncate: the file cut to "
          "half; delete: removed; stale: replaced by the previous save (format dcp: in the "
          "shard of each rank in `ranks`)")
          .required()
          .choices({"nan", "inf", "bitflip", "truncate", "delete", "stale"}),
      Key("target", KeyType::kString,
          "parameter:NAME or optimizer:NAME.STATE inside the checkpoint (nan/inf/bitflip; "
          "default: the first parameter)"),
      Key("bit", KeyType::kInt, "bitflip: the float32 bit flipped (0-31)").def(30).min(0).max(31),
  };
  info.target_wheres = {harness::TargetWhere::kParameter, harness::TargetWhere::kOptimizer};
  info.python_agent = true;  // external jobs: the agent corrupts the job's own saved files
  info.check_job = [](const harness::FaultSpec& f, const harness::Scenario& s) {
    harness::check_target_exists(f, s);
    const std::string label = harness::fault_label(f);
    const bool by_save = f.params.given("save");
    if (by_save == f.params.given("step")) {
      harness::scenario_error(f.pos, label +
                                         ": give exactly one of `save` (1-based) and `step` "
                                         "(the step the save was made before)");
    }
    const std::string mode = f.params.get_string("mode");
    if (f.params.given("target") && mode != "nan" && mode != "inf" && mode != "bitflip") {
      harness::scenario_error(f.params.pos("target"),
                              label + ".target: only for mode nan, inf or bitflip");
    }
    if (f.params.given("bit") && mode != "bitflip") {
      harness::scenario_error(f.params.pos("bit"),
                              label + ".bit: only for mode bitflip (mode is \"" + mode + "\")");
    }
    // External jobs: the agent corrupts the job's own saves, whatever their cadence (the
    // loader already holds `step` below [job].steps).
    if (s.job.external()) return;
    if (!s.checkpoint.on()) {
      harness::scenario_error(f.pos, label +
                                         ": kind \"checkpoint\" needs a [checkpoint] table "
                                         "(the built-in job writes no checkpoint without one)");
    }
    if (s.job.restarts < 1) {
      harness::scenario_error(
          f.pos, label +
                     ": kind \"checkpoint\" needs [job] restarts >= 1 (the built-in job reads "
                     "a checkpoint only when it is relaunched: without a relaunch the corrupted "
                     "file is never loaded and the fault tests nothing)");
    }
    const int64_t every = s.checkpoint.every;
    const int64_t step = by_save ? f.params.get_int("save") * every : f.step;
    if (step % every != 0 || step == 0 || step >= s.job.steps) {
      harness::scenario_error(
          f.params.pos(by_save ? "save" : "step"),
          fmt::format("{}.{}: no save is made {} step {} ([checkpoint].every = {}, [job].steps = "
                      "{}: saves before steps {}, {}, ...)",
                      label, by_save ? "save" : "step", by_save ? "at" : "before", step, every,
                      s.job.steps, every, 2 * every));
    }
    // Faults that could never fire are refused here, not found out at run time (where the
    // first would stop rank 0 with an error and spend a restart on it).
    if (mode == "stale" && step == every) {
      harness::scenario_error(
          f.params.pos(by_save ? "save" : "step"),
          fmt::format("{}: mode \"stale\" replaces a save by the one before it, and the first "
                      "save (before step {}) has none: name the second save or a later one",
                      label, every));
    }
    if (s.checkpoint.format != "dcp" && !f.ranks.contains(0)) {
      harness::scenario_error(
          f.pos, label +
                     ".ranks: the torch format's checkpoint is one file that rank 0 writes; "
                     "`ranks` picks shards only with [checkpoint] format = \"dcp\" (leave "
                     "it out, or give ranks = [0])");
    }
  };
  // `step` is the step of the corrupted save (its ground truth), whichever key named the save.
  info.fault_step = [](const harness::FaultSpec& f, const harness::Scenario& s) {
    // External jobs save on their own schedule: the agent's inject event carries the save's step.
    return f.params.given("save") && s.checkpoint.on()
               ? f.params.get_int("save") * s.checkpoint.every
               : f.step;
  };
  info.make = [](const harness::FaultSpec& f,
                 const harness::Scenario& s) -> std::unique_ptr<Injector> {
    return std::make_unique<CheckpointInjector>(f, s.checkpoint.every);
  };
  info.refusal = [](const harness::Scenario& s, const harness::CampaignTargets&,
                    bool) -> std::string {
    return s.checkpoint.on() && s.job.restarts > 0 ? ""
                                                   : "needs [checkpoint] and [job] restarts (a "
                                                     "corrupted checkpoint matters only when a "
                                                     "relaunch loads it)";
  };
  // Campaigns: the first save (a crash or hang drawn after it makes a relaunch load it).
  // --values nonfinite: NaN in the checkpoint only; finite: refused (no finite mode).
  info.values_refusal = [](harness::DrawValues v) -> std::string {
    return v == harness::DrawValues::kFinite
               ? "its corruptions are NaN, a top exponent bit flip, a truncated or deleted file; "
                 "draw it with --values any or nonfinite"
               : "";
  };
  info.draw = [](harness::FaultDraw& d, nlohmann::ordered_json& f) {
    static const std::vector<std::string> modes = {"nan", "bitflip", "truncate", "delete"};
    f["mode"] = d.values() == harness::DrawValues::kNonfinite ? modes.front() : d.pick(modes);
    f["step"] = d.scenario().checkpoint.every;
    // format "torch": rank 0 writes the checkpoint; "dcp": a shard, drawn
    const harness::Scenario& s = d.scenario();
    const int64_t shard =
        s.checkpoint.format == "dcp" ? int64_t(d.below(uint64_t(s.job.ranks))) : 0;
    f["ranks"] = nlohmann::ordered_json::array({shard});
  };
  // A corrupted checkpoint matters when a relaunch loads it: rank 0 crashes at the step the
  // save was made before (the save comes first, harness/job/runner.cpp train), one-shot.
  info.companions = [](const nlohmann::ordered_json& f, const harness::Scenario&) {
    return std::vector<nlohmann::ordered_json>{
        {{"kind", "crash"}, {"ranks", nlohmann::ordered_json::array({0})}, {"step", f["step"]}}};
  };
  info.truth = [](const nlohmann::ordered_json& f) {
    std::optional<std::string> layer;
    if (f.contains("target")) {  // the layer as the loader reports it: NAME, NAME.STATE
      const std::string t = f["target"].get<std::string>();
      layer = t.substr(t.find(':') + 1);
    }
    return harness::KindTruth{harness::Cause::kCheckpointCorruption, layer};
  };
  return info;
}

}  // namespace

NANCHAOS_REGISTER_FAULT_KIND(checkpoint, checkpoint_kind());

}  // namespace nanchaos::inject
