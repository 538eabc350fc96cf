// Single-process checks of what a worker decides before training: which checkpoint auto-resume
// takes, whether a checkpoint fits this build and model, and which device a local rank binds.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/scratch.hpp"
#include "workloads/comm/bootstrap.hpp"
#include "workloads/train/checkpoint.hpp"

namespace fl {
namespace {
namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  const fs::path d =
      test::removed_at_exit(fs::temp_directory_path() /
                            ("faultline-resume-test-" + name + "-" + std::to_string(::getpid())));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void fake_step(const fs::path& dir, int step) {
  fs::create_directories(dir / ("step_" + std::to_string(step)));
  std::ofstream(dir / ("step_" + std::to_string(step)) / "manifest.json") << "{}";
}

TEST(AutoResume, FollowsLatestOrStartsFreshOrScans) {
  const fs::path d = fresh("auto");
  std::string note;
  EXPECT_EQ(train::auto_resume_target(d.string(), false, note), "");
  EXPECT_NE(note.find("no checkpoint in"), std::string::npos) << note;
  fake_step(d, 4);
  fake_step(d, 8);
  fs::create_directories(d / "step_12");  // interrupted save: no manifest
  std::ofstream(d / "latest") << "step_4\n";
  EXPECT_EQ(train::auto_resume_target(d.string(), false, note), (d / "step_4").string());
  fs::remove(d / "latest");
  // The pointer is gone: without scan nothing is resumed (the silent restart); with scan the
  // newest complete checkpoint is taken.
  EXPECT_EQ(train::auto_resume_target(d.string(), false, note), "");
  EXPECT_NE(note.find("although it holds step_8: nothing resumed"), std::string::npos) << note;
  EXPECT_EQ(train::auto_resume_target(d.string(), true, note), (d / "step_8").string());
}

TEST(AutoResume, NeverFollowsAStepDirectoryOrLatestOutOfTheSaveDirectory) {
  const fs::path d = fresh("escape"), outside = fresh("escape-outside");
  fake_step(outside, 100);
  fake_step(d, 4);
  // The newest step directory is a link out of the save directory: the scan refuses it.
  fs::create_directory_symlink(outside / "step_100", d / "step_100");
  std::string note;
  try {
    train::auto_resume_target(d.string(), true, note);
    ADD_FAILURE() << "followed " << note;
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("step_100 leads to " + (outside / "step_100").string() +
                                         ", outside the save directory"),
              std::string::npos)
        << e.what();
  }
  // `latest` with a path, an absolute path or a parent: refused before anything is read.
  for (const std::string& bad : std::vector<std::string>{"../escape-outside/step_100",
                                                         (outside / "step_100").string(), ".."}) {
    std::ofstream(d / "latest", std::ios::trunc) << bad << "\n";
    try {
      train::auto_resume_target(d.string(), false, note);
      ADD_FAILURE() << "followed latest " << bad;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("is not a directory name inside it"), std::string::npos)
          << e.what();
    }
  }
  std::ofstream(d / "latest", std::ios::trunc) << "step_4\n";
  EXPECT_EQ(train::auto_resume_target(d.string(), false, note), (d / "step_4").string());
  fs::remove_all(d);
  fs::remove_all(outside);
}

nlohmann::json manifest(int version, int vocab, int d_model = 32) {
  return {{"format_version", version},
          {"model",
           {{"vocab", vocab}, {"d_model", d_model}, {"layers", 2}, {"heads", 4}, {"seq_len", 16}}}};
}

std::string incompatibility(const nlohmann::json& m) {
  try {
    train::check_compatible("ckpt", m, model::GptConfig::tiny());
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointCompatibility, NamesTheVersionOrTheFirstTensorThatDiffers) {
  EXPECT_EQ(incompatibility(manifest(train::kCheckpointFormatVersion, 64)), "");
  EXPECT_NE(
      incompatibility(manifest(2, 64)).find("has format version 2, this build reads version 1"),
      std::string::npos);
  EXPECT_NE(
      incompatibility(manifest(1, 96))
          .find("size mismatch for wte: [96 x 32] in the checkpoint, [64 x 32] in this model"),
      std::string::npos);
  EXPECT_NE(incompatibility(manifest(1, 64, 64)).find("size mismatch for wte: [64 x 64]"),
            std::string::npos);
}

TEST(DeviceSelection, AVisibleListNarrowsTheNodesDevices) {
  ::setenv("FAULTLINE_DEVICES_PER_NODE", "4", 1);
  ::setenv("FAULTLINE_VISIBLE_DEVICES", "2,3", 1);
  comm::WorkerIdentity id;
  id.rank = 5;
  id.local_rank = 1;
  id.node_rank = 1;
  EXPECT_EQ(comm::select_device(id), 3);
  id.local_rank = 2;
  try {
    comm::select_device(id);
    FAIL() << "local rank 2 got a device";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("[rank 5] invalid device ordinal: LOCAL_RANK 2 selects "
                                         "device 2, but 2 device(s) are visible on node 1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fl
