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

}  // namespace
}  // namespace fl::test
