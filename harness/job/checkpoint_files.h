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
// Each file is written as NAME.tmp-PID, flushed to disk (fsync) and renamed over NAME, so a rank
// killed during a save leaves a temporary file and never a checkpoint that looks complete (POSIX
// rename(2) is atomic within a file system).
// Thread-safety: plain functions; one writer (rank 0) per folder.
#pragma once

#include <cstdint>
#include <filesystem>
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

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename). Throws
/// std::runtime_error naming the path and errno's text on any failure (the temporary is removed).
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);

/// The steps of the checkpoints in `dir` that have a manifest, newest first (a missing folder:
/// none). Files that do not follow the naming are ignored.
std::vector<int64_t> checkpoint_steps(const std::filesystem::path& dir);

/// Deletes every checkpoint (archive and manifest) but the newest `keep`. Temporary files of an
/// interrupted save stay (evidence). Errors are ignored (a file already gone).
void prune_checkpoints(const std::filesystem::path& dir, int64_t keep);

}  // namespace nanchaos::harness
