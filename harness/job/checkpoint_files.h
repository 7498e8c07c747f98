// The built-in job's checkpoint folder (SCENARIO_FORMAT.md "Recovery by restart"): names, the
// manifest, the atomic write, listing and pruning. Torch-free: the tensors' archive is written by
// the rank (checkpoint_rank.cpp); this file knows only paths, bytes and JSON.
//
// Layout, under RUN/checkpoints/ (RUN: the scenario's run folder, kept across the launches of
// one scenario and emptied before its first):
//   step-000010.pt     the tensors (a LibTorch archive), written by rank 0
//   step-000010.json   the manifest, written after the archive is in place: {format, step, world,
//                      file, tensors: [{name, digest}]}; a checkpoint without its manifest is
//                      incomplete and is never loaded
// Format "dcp" (torch.distributed.checkpoint's layout: a folder per checkpoint, a shard per rank
// named as DCP names them, the metadata written last):
//   step-000010/__0_0.distcp ... __<W-1>_0.distcp
//                      rank r's shard (a LibTorch archive): the tensors of the training state
//                      it owns (a round-robin split of the state's tensors over the ranks, so a
//                      shard is a real part of the state) and its own CPU RNG state
//   step-000010/.metadata
//                      JSON written by rank 0 after every rank's shard is renamed into place
//                      (the ranks agree through a collective): {format, step, world, shards:
//                      [{rank, file, bytes}], tensors: [{name, rank, key, digest}]}; a checkpoint
//                      without its .metadata is incomplete and is never loaded. (DCP's own
//                      .metadata is a pickle; ours holds the same facts as JSON.)
// Each file is written as NAME.tmp-PID, flushed to disk (fsync) and renamed over NAME, so a rank
// killed during a save leaves a temporary file and never a checkpoint that looks complete (POSIX
// rename(2) is atomic within a file system).
// Thread-safety: plain functions; one writer (rank 0) per folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nanchaos::harness {

/// RUN/checkpoints.
std::filesystem::path checkpoint_dir(const std::string& run_dir);
/// The archive of the checkpoint at `step` ("step-000010.pt" in `dir`).
std::filesystem::path checkpoint_archive(const std::filesystem::path& dir, int64_t step);
/// Its manifest ("step-000010.json").
std::filesystem::path checkpoint_manifest(const std::filesystem::path& dir, int64_t step);

/// Format "dcp": the checkpoint's folder ("step-000010" in `dir`).
std::filesystem::path checkpoint_dcp_folder(const std::filesystem::path& dir, int64_t step);
/// Its metadata, written last ("step-000010/.metadata").
std::filesystem::path checkpoint_dcp_metadata(const std::filesystem::path& dir, int64_t step);
/// Rank `rank`'s shard ("step-000010/__2_0.distcp": DCP's __RANK_0.distcp naming).
std::filesystem::path checkpoint_dcp_shard(const std::filesystem::path& dir, int64_t step,
                                           int rank);

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename). Throws
/// std::runtime_error naming the path and errno's text on any failure (the temporary is removed).
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);

/// Tests only: called with the final path between a temporary file's fsync and its rename (a
/// hook that throws is a writer that died there: the temporary stays, the rename never happens).
/// Empty (the default): none. Not thread-safe: set it before any rank starts.
void set_checkpoint_rename_hook(std::function<void(const std::filesystem::path&)> hook);

/// The steps of the checkpoints in `dir` that are complete (format "torch": a manifest; "dcp": a
/// folder with its .metadata), newest first (a missing folder: none). Files that do not follow
/// the naming are ignored.
std::vector<int64_t> checkpoint_steps(const std::filesystem::path& dir);

/// Deletes every checkpoint (archive and manifest, or dcp folder) but the newest `keep`: the
/// manifest or .metadata first, so a checkpoint is never half-listed. Temporary files of an
/// interrupted save stay (evidence). Errors are ignored (a file already gone).
void prune_checkpoints(const std::filesystem::path& dir, int64_t keep);

}  // namespace nanchaos::harness
