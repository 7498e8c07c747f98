// The checkpoint folder (harness/job/checkpoint_files.h): atomic writes, which checkpoints are
// listed (only those with a manifest, newest first), and pruning to `keep`.
#include "harness/job/checkpoint_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace nanchaos::harness {
namespace {

namespace fs = std::filesystem;

class CheckpointFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nanchaos-ckpt-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void Save(int64_t step) {
    write_file_atomic(checkpoint_archive(dir_, step), "tensors");
    write_file_atomic(checkpoint_manifest(dir_, step), "{}");
  }
  fs::path dir_;
};

TEST_F(CheckpointFilesTest, NamesArePaddedSoTheyListInStepOrder) {
  EXPECT_EQ(checkpoint_archive(dir_, 10).filename(), "step-000010.pt");
  EXPECT_EQ(checkpoint_manifest(dir_, 10).filename(), "step-000010.json");
  EXPECT_EQ(checkpoint_dir("/r/x"), fs::path("/r/x/checkpoints"));
}

TEST_F(CheckpointFilesTest, AtomicWriteReplacesWholeAndLeavesNoTemporary) {
  const fs::path p = dir_ / "f";
  write_file_atomic(p, "first version, longer");
  write_file_atomic(p, "second");
  EXPECT_EQ(Read(p), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(CheckpointFilesTest, AtomicWriteIntoAMissingFolderNamesThePath) {
  try {
    write_file_atomic(dir_ / "no" / "such" / "f", "x");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/f.tmp-"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointFilesTest, ListsOnlyCheckpointsWithAManifestNewestFirst) {
  Save(3);
  Save(12);
  Save(6);
  // An archive whose manifest was never written (a save cut short) and stray files.
  write_file_atomic(checkpoint_archive(dir_, 9), "half");
  std::ofstream(dir_ / "step-000015.json.tmp-42") << "{";
  std::ofstream(dir_ / "notes.json") << "{}";
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<int64_t>{12, 6, 3}));
  EXPECT_TRUE(checkpoint_steps(dir_ / "missing").empty());
}

TEST_F(CheckpointFilesTest, PruneKeepsTheNewestAndRemovesBothFilesOfTheOthers) {
  for (int64_t s : {3, 6, 9, 12}) Save(s);
  prune_checkpoints(dir_, 2);
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<int64_t>{12, 9}));
  EXPECT_FALSE(fs::exists(checkpoint_archive(dir_, 6)));
  EXPECT_FALSE(fs::exists(checkpoint_archive(dir_, 3)));
  EXPECT_TRUE(fs::exists(checkpoint_archive(dir_, 9)));
}

// Format "dcp": a folder per save, listed only once its .metadata is in place.
TEST_F(CheckpointFilesTest, DcpFoldersAreNamedAsDcpAndListedOnlyWithTheirMetadata) {
  EXPECT_EQ(checkpoint_dcp_folder(dir_, 10).filename(), "step-000010");
  EXPECT_EQ(checkpoint_dcp_metadata(dir_, 10), dir_ / "step-000010" / ".metadata");
  EXPECT_EQ(checkpoint_dcp_shard(dir_, 10, 3), dir_ / "step-000010" / "__3_0.distcp");
  for (int64_t s : {4, 8, 12}) {
    fs::create_directories(checkpoint_dcp_folder(dir_, s));
    write_file_atomic(checkpoint_dcp_shard(dir_, s, 0), "shard 0");
    write_file_atomic(checkpoint_dcp_shard(dir_, s, 1), "shard 1");
  }
  write_file_atomic(checkpoint_dcp_metadata(dir_, 4), "{}");
  write_file_atomic(checkpoint_dcp_metadata(dir_, 8), "{}");
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<int64_t>{8, 4}));  // 12: shards, no metadata
  write_file_atomic(checkpoint_dcp_metadata(dir_, 12), "{}");
  prune_checkpoints(dir_, 2);
  EXPECT_EQ(checkpoint_steps(dir_), (std::vector<int64_t>{12, 8}));
  EXPECT_FALSE(fs::exists(checkpoint_dcp_folder(dir_, 4)));
  EXPECT_TRUE(fs::exists(checkpoint_dcp_shard(dir_, 8, 1)));
}

TEST_F(CheckpointFilesTest, WriterKilledBeforeRenameLeavesTheOldFileAndItsTemporary) {
  const fs::path p = dir_ / "f";
  write_file_atomic(p, "complete");
  set_checkpoint_rename_hook([&](const fs::path& final_path) {
    if (final_path == p) throw std::runtime_error("killed");
  });
  EXPECT_THROW(write_file_atomic(p, "new"), std::runtime_error);
  set_checkpoint_rename_hook(nullptr);
  EXPECT_EQ(Read(p), "complete");
  EXPECT_EQ(Read(p.string() + ".tmp-" + std::to_string(getpid())), "new");
}

}  // namespace
}  // namespace nanchaos::harness
