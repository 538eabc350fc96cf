// workload.freeze (workloads/train/freeze.hpp): frozen parameters get no gradient and are not in
// the optimizer, so their values never change while the others train; a pipeline stage left
// with nothing to train fails as torch.optim does (deepspeedai/DeepSpeed#5071).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"
#include "tests/support/train_run.hpp"
#include "workloads/model/config.hpp"
#include "workloads/model/params.hpp"
#include "workloads/train/freeze.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

TEST(Freeze, TrainableRunsLeaveOutTheFrozenRanges) {
  const std::vector<std::pair<size_t, size_t>> frozen = {{10, 20}, {30, 40}};
  using Runs = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(train::trainable_runs(frozen, 5, 40), (Runs{{0, 5}, {15, 25}, {35, 40}}));
  EXPECT_EQ(train::trainable_runs(frozen, 12, 5), Runs{});
  EXPECT_EQ(train::trainable_runs(frozen, 40, 3), (Runs{{0, 3}}));
  EXPECT_EQ(train::trainable_runs({}, 7, 3), (Runs{{0, 3}}));
}

TEST(Freeze, PatternsMatchStateDictNames) {
  model::GptConfig cfg;  // tiny
  const model::ParamLayout layout(cfg, 1, 0, 1, 0);
  size_t block0 = 0;
  for (const auto& s : layout.specs()) {
    if (s.name.rfind("h0.", 0) == 0) block0 += s.numel();
  }
  ASSERT_GT(block0, 0u);
  const auto r = train::frozen_ranges(layout, {"blocks.0.*"});
  size_t covered = 0;
  for (const auto& [lo, hi] : r) covered += hi - lo;
  EXPECT_EQ(covered, block0);
  EXPECT_TRUE(train::frozen_ranges(layout, {}).empty());
}

// A tied embedding is one tensor under two names: freezing either name freezes it on every
// stage that holds a copy (stage 0's wte and the last stage's word_embeddings_for_head), or the
// copies would drift apart.
TEST(Freeze, EitherNameOfATiedEmbeddingFreezesEveryCopy) {
  model::GptConfig cfg;
  cfg.structure.tie_embeddings = true;
  auto covered = [&](const model::ParamLayout& layout, const std::string& name,
                     const std::vector<std::string>& patterns) {
    const auto r = train::frozen_ranges(layout, train::freeze_patterns(patterns, cfg));
    for (const auto& s : layout.specs()) {
      if (s.name != name) continue;
      for (const auto& [lo, hi] : r) {
        if (lo <= s.offset && s.offset + s.numel() <= hi) return true;
      }
    }
    return false;
  };
  const model::ParamLayout whole(cfg, 1, 0, 1, 0), first(cfg, 1, 0, 2, 0), last(cfg, 1, 0, 2, 1);
  for (const std::string pattern : {"lm_head.weight", "wte.weight", "lm_head.*"}) {
    EXPECT_TRUE(covered(whole, "wte", {pattern})) << pattern;
    EXPECT_TRUE(covered(first, "wte", {pattern})) << pattern;
    EXPECT_TRUE(covered(last, "lm_head.weight", {pattern})) << pattern;
  }
  EXPECT_FALSE(covered(last, "lm_head.weight", {"wpe.weight"}));
  model::GptConfig untied;
  EXPECT_EQ(train::freeze_patterns({"lm_head.weight"}, untied),
            std::vector<std::string>{"lm_head.weight"});
}

// The tensors of a model file (safetensors), by name.
std::map<std::string, std::string> tensors(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::map<std::string, std::string> out;
  for (auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    const size_t a = e["data_offsets"][0], b = e["data_offsets"][1];
    out[name] = bytes.substr(8 + n + a, b - a);
  }
  return out;
}

// One step and three, each saving the model's weights, with weight decay on: the frozen block's
// are the same bytes (neither a gradient nor the optimizer's decay reached them), every other
// tensor moved. At ZeRO-1 in fp32 (whole master weights) and ZeRO-2 in bf16
// (partitioned fp32 master weights, 16-bit gradients).
TEST(Freeze, FrozenParametersKeepTheirValuesWhileTheOthersTrain) {
  const fs::path dir = fresh_test_dir("freeze", "values");
  for (const auto& [stage_, precision_] : {std::pair{1, "fp32"}, std::pair{2, "bf16"}}) {
    const int stage = stage_;
    const std::string precision = precision_;
    auto run = [&](int steps) {
      const auto out = dir / (std::to_string(stage) + "-" + std::to_string(steps));
      auto r = run_train(FAULTLINE_TRAIN, 2,
                         {"--dp", "2", "--zero", std::to_string(stage), "--precision", precision,
                          "--freeze", "blocks.0.*", "--weight-decay", "0.1",  // decay moves
                          // a parameter the optimizer holds even at a zero gradient
                          "--save-every", std::to_string(steps), "--save-dir", out.string(),
                          "--save-model-file", "state_dict"},
                         steps);
      EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
      return tensors(out / ("step_" + std::to_string(steps)) / "model.safetensors");
    };
    const auto one = run(1), three = run(3);
    ASSERT_FALSE(one.empty());
    int frozen = 0, moved = 0;
    for (const auto& [name, bytes] : one) {
      if (name.rfind("blocks.0.", 0) == 0) {
        EXPECT_EQ(three.at(name), bytes) << stage << " " << name;
        ++frozen;
      } else if (three.at(name) != bytes) {
        ++moved;
      }
    }
    EXPECT_GT(frozen, 0) << stage;
    EXPECT_GT(moved, 0) << stage;
  }
  fs::remove_all(dir);
}

TEST(Freeze, AStageWithNothingToTrainHasAnEmptyOptimizerParameterList) {
  auto r = run_train(FAULTLINE_TRAIN, 2,
                     {"--pp", "2", "--freeze", "wte.weight", "--freeze", "wpe.weight", "--freeze",
                      "blocks.1.*", "--freeze", "ln_f.*", "--freeze", "lm_head.*"},
                     2);
  EXPECT_NE(r.proc.exit_code, 0);
  EXPECT_NE(r.proc.output.find("ValueError: optimizer got an empty parameter list (rank 1, "
                               "pipeline stage 1 of 2"),
            std::string::npos)
      << r.proc.output;
  EXPECT_EQ(r.proc.output.find("rank 0, pipeline stage 0"), std::string::npos) << r.proc.output;
  // One stage holding the whole model still trains its unfrozen block.
  auto whole = run_train(FAULTLINE_TRAIN, 1,
                         {"--freeze", "wte.weight", "--freeze", "wpe.weight", "--freeze",
                          "blocks.1.*", "--freeze", "ln_f.*", "--freeze", "lm_head.*"},
                         2);
  EXPECT_EQ(whole.proc.exit_code, 0) << whole.proc.output;
  EXPECT_EQ(whole.steps.size(), 2u);
}

// DeepCompile's ZeRO-3 set-up (init_z3) looks up the optimizer's gradient partition of every
// parameter; before DeepSpeed 0.19.6 it did so for frozen ones too, which the optimizer never
// got (deepspeedai/DeepSpeed pull request 8214): the first frozen parameter's ds_id (wte 0,
// wpe 1, blocks.0.ln_1.weight 2) is a KeyError on every rank before any step.
TEST(Freeze, DeepCompilesZero3SetUpLooksUpFrozenParametersBeforeTheFix) {
  const std::vector<std::string> args = {"--dp",          "2",        "--zero",    "3",
                                         "--deepcompile", "--freeze", "blocks.0.*"};
  auto with_version = [&](const std::string& v) {
    auto a = args;
    a.insert(a.end(), {"--deepspeed-version", v});
    return run_train(FAULTLINE_TRAIN, 2, a, 2);
  };
  const auto old = with_version("0.19.3");
  EXPECT_NE(old.proc.exit_code, 0);
  EXPECT_TRUE(old.steps.empty()) << old.proc.output;
  // Every rank raises it; the launcher stops the job at the first exit, which on a busy machine
  // can come before the other has printed.
  EXPECT_NE(old.proc.output.find("KeyError: 2 (rank "), std::string::npos) << old.proc.output;
  EXPECT_NE(old.proc.output.find(": engine.compile() under DeepSpeed 0.19.3"), std::string::npos)
      << old.proc.output;
  EXPECT_NE(old.proc.output.find("'blocks.0.ln_1.weight' has requires_grad=False"),
            std::string::npos)
      << old.proc.output;
  // A frozen tied head is wte, ds_id 0.
  auto tied = args;
  tied.back() = "lm_head.weight";
  tied.insert(tied.end(), {"--tie-embeddings", "true", "--deepspeed-version", "0.19.5"});
  const auto head = run_train(FAULTLINE_TRAIN, 2, tied, 1);
  EXPECT_NE(head.proc.output.find("KeyError: 0 (rank "), std::string::npos) << head.proc.output;
  // The fixed release, and the old one with nothing frozen or below stage 3, train.
  const auto fixed = with_version("0.19.6");
  EXPECT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
  EXPECT_EQ(fixed.steps.size(), 2u);
  const auto none =
      run_train(FAULTLINE_TRAIN, 2,
                {"--dp", "2", "--zero", "3", "--deepcompile", "--deepspeed-version", "0.19.3"}, 1);
  EXPECT_EQ(none.proc.exit_code, 0) << none.proc.output;
  const auto z2 = run_train(FAULTLINE_TRAIN, 2,
                            {"--dp", "2", "--zero", "2", "--deepcompile", "--freeze", "blocks.0.*",
                             "--deepspeed-version", "0.19.3"},
                            1);
  EXPECT_EQ(z2.proc.exit_code, 0) << z2.proc.output;
  const auto pipe = run_train(FAULTLINE_TRAIN, 2, {"--pp", "2", "--deepcompile"}, 1);
  EXPECT_EQ(pipe.proc.exit_code, 2) << pipe.proc.output;
  EXPECT_NE(pipe.proc.output.find("workload.zero.deepcompile (--deepcompile) with pipeline"),
            std::string::npos)
      << pipe.proc.output;
}

TEST(Freeze, APatternThatMatchesNothingIsAConfigurationError) {
  auto r = run_train(FAULTLINE_TRAIN, 1, {"--freeze", "block.0.*"}, 1);
  EXPECT_EQ(r.proc.exit_code, 2) << r.proc.output;
  EXPECT_NE(r.proc.output.find("workload.freeze (--freeze) pattern 'block.0.*' matches no "
                               "parameter of the model"),
            std::string::npos)
      << r.proc.output;
}

}  // namespace
}  // namespace fl::test
