// workload.optimizer muon (workloads/train/muon.hpp): DeepSpeed's MuonWithAuxAdam. The
// Newton-Schulz iteration makes a matrix nearly semi-orthogonal; the use_muon parameters are the
// 2-D ones not named embed or lm_head; and where DeepSpeed runs the update decides what trains: at
// ZeRO stage 1 Muon (its momentum matters), at stage 0 the raw gradients
// (deepspeedai/DeepSpeed#8441).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "tests/support/process.hpp"
#include "tests/support/train_run.hpp"
#include "workloads/model/config.hpp"
#include "workloads/model/params.hpp"
#include "workloads/train/muon.hpp"

namespace fl::test {
namespace {

// X Xᵀ (or Xᵀ X for a tall X) of the result: near the identity, the singular values in the band
// the quintic's coefficients leave them (about 0.7 to 1.2), whatever the input's scale.
void expect_nearly_semi_orthogonal(int64_t rows, int64_t cols, float input_scale) {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, input_scale);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = nd(gen);
  train::newton_schulz5(x.data(), rows, cols);
  const int64_t r = std::min(rows, cols);
  auto at = [&](int64_t i, int64_t k) {  // element k of row i of the wide view
    return rows <= cols ? x[static_cast<size_t>(i * cols + k)]
                        : x[static_cast<size_t>(k * cols + i)];
  };
  const int64_t k_n = std::max(rows, cols);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < r; ++j) {
      double g = 0;
      for (int64_t k = 0; k < k_n; ++k) g += static_cast<double>(at(i, k)) * at(j, k);
      if (i == j) {
        EXPECT_GT(g, 0.45) << rows << "x" << cols << " diagonal " << i;
        EXPECT_LT(g, 1.5) << rows << "x" << cols << " diagonal " << i;
      } else {
        EXPECT_LT(std::fabs(g), 0.3) << rows << "x" << cols << " (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(Muon, NewtonSchulzLeavesNearlySemiOrthogonalMatrices) {
  expect_nearly_semi_orthogonal(16, 48, 1.0f);
  expect_nearly_semi_orthogonal(48, 16, 1e-3f);  // tall: transposed and back
  expect_nearly_semi_orthogonal(32, 32, 50.0f);
}

TEST(Muon, TwoDimensionalParametersNotNamedEmbedOrLmHead) {
  model::GptConfig cfg;  // tiny, tied head
  const model::ParamLayout layout(cfg, 1, 0, 1, 0);
  const auto matrices = train::muon_matrices(layout);
  std::vector<std::string> names;
  for (const auto& s : layout.specs()) {
    for (const auto& m : matrices) {
      if (m.offset == s.offset) names.push_back(s.name);
    }
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "h0.attn.qkv.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "h0.mlp.fc.weight"), names.end());
  // GPT-2's names hold no "embed": DeepSpeed's rule gives wte and wpe to Muon too.
  EXPECT_NE(std::find(names.begin(), names.end(), "wte"), names.end());
  for (const auto& n : names) {
    EXPECT_EQ(n.find("bias"), std::string::npos) << n;
    EXPECT_EQ(n.find("ln"), std::string::npos) << n;
  }
  // A tensor-parallel shard is refused: its iteration is not the matrix's.
  const model::ParamLayout shard(cfg, 2, 0, 1, 0);
  EXPECT_THROW(train::muon_matrices(shard), ConfigError);
}

TrainRun train(std::vector<std::string> args, int steps) {
  std::vector<std::string> a = {"--dp", "2",    "--optimizer", "muon",
                                "--lr", "0.02", "--warmup",    "0"};
  a.insert(a.end(), args.begin(), args.end());
  return run_train(FAULTLINE_TRAIN, 2, a, steps);
}

std::vector<double> losses(const TrainRun& r) {
  std::vector<double> out;
  for (const auto& s : r.steps) out.push_back(s["loss"].get<double>());
  return out;
}

TEST(Muon, StageZeroNeverReadsTheMomentumStageOneTrainsWithIt) {
  const TrainRun z0a = train({"--zero", "0", "--momentum", "0.95"}, 6);
  const TrainRun z0b = train({"--zero", "0", "--momentum", "0.5"}, 6);
  const TrainRun z1a = train({"--zero", "1", "--momentum", "0.95"}, 6);
  const TrainRun z1b = train({"--zero", "1", "--momentum", "0.5"}, 6);
  for (const auto* r : {&z0a, &z0b, &z1a, &z1b}) {
    ASSERT_EQ(r->proc.exit_code, 0) << r->proc.output;
    ASSERT_EQ(r->steps.size(), 6u) << r->proc.output;
  }
  // Stage 0: p -= lr x grad for the use_muon weights whatever the momentum (bit for bit).
  EXPECT_EQ(losses(z0a), losses(z0b));
  // Stage 1: Muon's Nesterov momentum changes the updates from the second step on, and the
  // first step's update is orthogonalised, unlike stage 0's.
  EXPECT_NE(losses(z1a).back(), losses(z1b).back());
  EXPECT_EQ(losses(z1a).front(), losses(z0a).front());  // the same weights before any update
  EXPECT_NE(losses(z1a)[1], losses(z0a)[1]);
}

TEST(Muon, LayoutsNotModelledAreRefusedNamingTheOption) {
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--zero", "2"}, "ZeRO stages 0 and 1 (this run: 2; allowed: 0 or 1)"},
           {{"--precision", "bf16"}, "fp32 only (allowed: workload.precision fp32"},
       }) {
    const TrainRun r = train(args, 1);
    EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
    EXPECT_NE(
        r.proc.output.find("workload.optimizer muon (--optimizer muon) is modelled for " + want),
        std::string::npos)
        << r.proc.output;
  }
}

}  // namespace
}  // namespace fl::test
