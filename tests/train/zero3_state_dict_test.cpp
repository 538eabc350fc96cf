// ZeRO-3 state-dict loads under the real launcher (docs/workloads.md#zero-3-state-dicts): a resume
// that calls model.load_state_dict with the full state dict meets the size-0 placeholders on every
// rank; the same load inside GatheredParameters on data-parallel rank 0 resumes exactly as the
// engine's own load does when modifier_rank is that rank, and keeps the initial weights when it
// is None or another rank (the load is silently lost). fl-ckpt consolidate turns the ZeRO-3
// checkpoint into one without ZeRO in one process, through the helper's no-group path; asked as
// code that assumes a process group, it fails with PyTorch's words.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/exit_codes.hpp"
#include "tests/support/process.hpp"
#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

class Zero3StateDict : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_test_dir("z3sd", testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Six steps at ZeRO `stage` on dp 2, saved at step 3 (kept in saved_), then resumed from step 3
  // with `extra`.
  TrainRun resumed(int stage, std::vector<std::string> extra) {
    std::vector<std::string> layout = {"--dp", "2", "--zero", std::to_string(stage)};
    auto with = [&](std::vector<std::string> more) {
      auto a = layout;
      a.insert(a.end(), more.begin(), more.end());
      return a;
    };
    saved_ =
        run_train(FAULTLINE_TRAIN, 2, with({"--save-every", "3", "--save-dir", dir_.string()}), 6);
    EXPECT_EQ(saved_.proc.exit_code, 0) << saved_.proc.output;
    extra.insert(extra.begin(), {"--resume", (dir_ / "step_3").string()});
    return run_train(FAULTLINE_TRAIN, 2, with(extra), 6);
  }
  std::vector<float> losses(const TrainRun& r) {
    std::vector<float> out;
    for (auto& s : r.steps) out.push_back(s["loss"].get<float>());
    return out;
  }
  std::vector<float> saved_tail() {
    auto all = losses(saved_);
    return all.size() == 6 ? std::vector<float>(all.begin() + 3, all.end()) : all;
  }

  fs::path dir_;
  TrainRun saved_;
};

TEST_F(Zero3StateDict, APlainLoadIntoTheStage3PlaceholdersFailsWithPyTorchsSizeMismatch) {
  auto r = resumed(3, {"--load-into", "module"});
  EXPECT_EQ(r.proc.exit_code, exit_code::kCheckpoint) << r.proc.output;
  // The tiny model: vocab 64, d_model 32; every key is refused, the tied alias too.
  for (const char* line :
       {"Error(s) in loading state_dict for GPT:\n\tsize mismatch for wte.weight: copying a param "
        "with shape torch.Size([64, 32]) from checkpoint, the shape in current model is "
        "torch.Size([0]).",
        "\tsize mismatch for ln_f.bias: copying a param with shape torch.Size([32]) from "
        "checkpoint, the shape in current model is torch.Size([0]).",
        "\tsize mismatch for lm_head.weight: copying a param with shape torch.Size([64, 32]) "
        "from checkpoint, the shape in current model is torch.Size([0])."}) {
    EXPECT_NE(r.proc.output.find(line), std::string::npos) << line << "\n" << r.proc.output;
  }
}

TEST_F(Zero3StateDict, BelowStage3APlainLoadFindsWholeParametersAndResumesExactly) {
  auto r = resumed(2, {"--load-into", "module"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(losses(r), saved_tail());
}

TEST_F(Zero3StateDict, LoadingInsideGatheredParametersOnTheModifierRankResumesExactly) {
  auto r = resumed(3, {"--load-into", "gathered", "--modifier-rank", "0"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  EXPECT_EQ(losses(r), saved_tail());
}

TEST_F(Zero3StateDict, ALoadOnARankThatIsNotTheModifierIsSilentlyLost) {
  auto none = resumed(3, {"--load-into", "gathered", "--modifier-rank=-1"});
  ASSERT_EQ(none.proc.exit_code, 0) << none.proc.output;
  auto other = run_train(FAULTLINE_TRAIN, 2,
                         {"--dp", "2", "--zero", "3", "--resume", (dir_ / "step_3").string(),
                          "--load-into", "gathered", "--modifier-rank", "1"},
                         6);
  ASSERT_EQ(other.proc.exit_code, 0) << other.proc.output;
  // Both keep the initial weights (rank 1 broadcasts what it did not change): the same losses,
  // and above the resumed run's, which starts from the trained weights.
  EXPECT_EQ(losses(none), losses(other));
  ASSERT_EQ(losses(none).size(), 3u);
  EXPECT_GT(losses(none)[0], saved_tail()[0]);
}

TEST_F(Zero3StateDict, AModifierRankOutsideTheDataParallelGroupNamesTheOption) {
  auto r = resumed(3, {"--load-into", "gathered", "--modifier-rank", "2"});
  EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
  EXPECT_NE(r.proc.output.find("workload.checkpoint.modifier_rank (--modifier-rank) is 2 (allowed: "
                               "-1 for None, or a data-parallel rank 0..1)"),
            std::string::npos)
      << r.proc.output;
}

TEST_F(Zero3StateDict, ConsolidateWithoutAProcessGroupKeepsEveryValueAndResumesWithoutZero) {
  auto r = resumed(3, {"--load-into", "engine"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  const auto out = dir_ / "fp32";
  auto c = run_process(
      {FAULTLINE_CKPT, "consolidate", "--in", (dir_ / "step_3").string(), "--out", out.string()});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("consolidating as rank 0 of 1"), std::string::npos) << c.output;
  auto before = run_process({FAULTLINE_CKPT, "digest", (dir_ / "step_3").string()});
  auto after = run_process({FAULTLINE_CKPT, "digest", out.string()});
  ASSERT_EQ(before.exit_code, 0) << before.output;
  EXPECT_EQ(before.output, after.output);
  auto inspect = run_process({FAULTLINE_CKPT, "inspect", out.string()});
  EXPECT_NE(inspect.output.find("layout: world 1 = dp 1 x tp 1 x pp 1, ZeRO 0"), std::string::npos)
      << inspect.output;
  auto t = run_train(FAULTLINE_TRAIN, 1, {"--resume", out.string()}, 5);
  EXPECT_EQ(t.proc.exit_code, 0) << t.proc.output;
  EXPECT_EQ(t.steps.size(), 2u) << t.proc.output;
}

TEST_F(Zero3StateDict, AToolThatAssumesAProcessGroupFailsWithPyTorchsWords) {
  auto r = resumed(3, {"--load-into", "engine"});
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  auto c = run_process({FAULTLINE_CKPT, "consolidate", "--in", (dir_ / "step_3").string(), "--out",
                        (dir_ / "fp32").string(), "--assume-process-group"});
  EXPECT_EQ(c.exit_code, exit_code::kCommError) << c.output;
  EXPECT_NE(c.output.find("Default process group has not been initialized, please make sure to "
                          "call init_process_group."),
            std::string::npos)
      << c.output;
  EXPECT_FALSE(fs::exists(dir_ / "fp32"));
}

// --deepspeed VERSION reads the checkpoint as that release's zero_to_fp32.py: a ZeRO-1 checkpoint
// is an unknown stage before 0.10.0 (DeepSpeed#3089) and converts from it; a stage-0 checkpoint
// has no ZeRO optimizer files at any release (DeepSpeed#6699); stage 2 converts at 0.9.5.
TEST_F(Zero3StateDict, ZeroToFp32OfARelease) {
  auto convert = [&](const std::string& ckpt, const std::string& version) {
    return run_process({FAULTLINE_CKPT, "consolidate", "--in", (dir_ / ckpt).string(), "--out",
                        (dir_ / (ckpt + "-" + version)).string(), "--deepspeed", version});
  };
  for (int stage : {0, 1, 2}) {
    auto r = run_train(FAULTLINE_TRAIN, 2,
                       {"--dp", "2", "--zero", std::to_string(stage), "--save-every", "2",
                        "--save-dir", (dir_ / ("z" + std::to_string(stage))).string()},
                       2);
    ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  }
  auto old = convert("z1", "0.9.5");
  EXPECT_EQ(old.exit_code, exit_code::kCheckpoint) << old.output;
  EXPECT_NE(old.output.find("ValueError: unknown zero stage 1 (zero_to_fp32.py of DeepSpeed "
                            "0.9.5 knows stages 2 and 3"),
            std::string::npos)
      << old.output;
  EXPECT_FALSE(fs::exists(dir_ / "z1-0.9.5"));
  auto fixed = convert("z1", "0.10.0");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  EXPECT_NE(fixed.output.find("Detected checkpoint of type zero stage 1, world_size: 2"),
            std::string::npos)
      << fixed.output;
  EXPECT_EQ(run_process({FAULTLINE_CKPT, "digest", (dir_ / "z1").string()}).output,
            run_process({FAULTLINE_CKPT, "digest", (dir_ / "z1-0.10.0").string()}).output);
  auto z0 = convert("z0", "0.16.0");
  EXPECT_EQ(z0.exit_code, exit_code::kCheckpoint) << z0.output;
  EXPECT_NE(z0.output.find("FileNotFoundError: can't find *_optim_states.pt files in directory"),
            std::string::npos)
      << z0.output;
  EXPECT_EQ(convert("z2", "0.9.5").exit_code, 0);
  auto bad = convert("z2", "latest");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--deepspeed 'latest' is not a version (allowed: MAJOR.MINOR"),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace fl::test
