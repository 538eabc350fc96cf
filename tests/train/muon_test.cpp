// workload.optimizer muon (workloads/train/muon.hpp): DeepSpeed's MuonWithAuxAdam. The
// Newton-Schulz iteration makes a matrix nearly semi-orthogonal; the use_muon parameters are the
// 2-D ones not named embed or lm_head; and where DeepSpeed runs the update decides what trains: at
// ZeRO stage 1 Muon (its momentum matters), at stage 0 the raw gradients
// (deepspeedai/DeepSpeed#8441).
#include <gtest/gtest.h>

#include <algorithm>
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
  model::GptConfig cfg;  // tiny, untied: lm_head.weight is a parameter of its own
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
  EXPECT_EQ(std::find(names.begin(), names.end(), "lm_head.weight"), names.end());
  for (const auto& n : names) {
    EXPECT_EQ(n.find("bias"), std::string::npos) << n;
    EXPECT_EQ(n.find("ln"), std::string::npos) << n;
  }
  // A tensor-parallel shard is refused: its iteration is not the matrix's.
  const model::ParamLayout shard(cfg, 2, 0, 1, 0);
  EXPECT_THROW(train::muon_matrices(shard), ConfigError);
}

// Muon's update of one matrix over two steps against the same arithmetic in double: the
// momentum's lerp, the Nesterov mix, five Newton-Schulz iterations of the normalised matrix
// (transposed when tall) and the sqrt(max(1, rows / cols)) scale.
std::vector<double> reference_update(std::vector<double>& m, const std::vector<float>& g,
                                     int64_t rows, int64_t cols, double beta) {
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, k = tall ? rows : cols;
  std::vector<double> u(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    m[i] += (1 - beta) * (g[i] - m[i]);
    u[i] = g[i] + beta * (m[i] - g[i]);
  }
  std::vector<double> X(u.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      X[tall ? j * rows + i : i * cols + j] = u[i * cols + j];
    }
  }
  double norm = 0;
  for (double v : X) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  for (double& v : X) v /= norm;
  for (int step = 0; step < 5; ++step) {
    std::vector<double> A(r * r, 0.0), B(r * r, 0.0), next(X.size(), 0.0);
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        for (int64_t q = 0; q < k; ++q) A[i * r + j] += X[i * k + q] * X[j * k + q];
      }
    }
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        double a2 = 0;
        for (int64_t q = 0; q < r; ++q) a2 += A[i * r + q] * A[q * r + j];
        B[i * r + j] = -4.7750 * A[i * r + j] + 2.0315 * a2;
      }
    }
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        double bx = 0;
        for (int64_t q = 0; q < r; ++q) bx += B[i * r + q] * X[q * k + j];
        next[i * k + j] = 3.4445 * X[i * k + j] + bx;
      }
    }
    X = next;
  }
  const double scale = std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
  std::vector<double> out(u.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      out[i * cols + j] = scale * X[tall ? j * rows + i : i * cols + j];
    }
  }
  return out;
}

TEST(Muon, TheUpdateOfTwoStepsIsMuonsArithmetic) {
  model::GptConfig cfg;
  const model::ParamLayout layout(cfg, 1, 0, 1, 0);
  train::Muon muon(layout, 0.95f, MemoryAccountant::host());
  const auto matrices = train::muon_matrices(layout);
  ASSERT_FALSE(matrices.empty());
  bool saw_tall = false, saw_wide = false;
  std::vector<std::vector<double>> momentum;
  for (const auto& mat : matrices) momentum.emplace_back(mat.numel(), 0.0);
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (int step = 0; step < 2; ++step) {
    std::vector<float> grads(layout.total());
    for (float& v : grads) v = nd(gen);
    const std::vector<float> before = grads;
    muon.orthogonalise(grads.data(), 0, grads.size());
    for (size_t i = 0; i < matrices.size(); ++i) {
      const auto& mat = matrices[i];
      saw_tall |= mat.rows > mat.cols;
      saw_wide |= mat.rows < mat.cols;
      const std::vector<float> g(before.begin() + static_cast<long>(mat.offset),
                                 before.begin() + static_cast<long>(mat.offset + mat.numel()));
      const auto want = reference_update(momentum[i], g, mat.rows, mat.cols, 0.95);
      for (size_t e = 0; e < mat.numel(); ++e) {
        ASSERT_NEAR(grads[mat.offset + e], want[e], 1e-4)
            << "step " << step << " matrix " << i << " element " << e;
      }
    }
  }
  EXPECT_TRUE(saw_tall && saw_wide);
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
  // No momentum given is DeepSpeed's default, 0.95.
  const TrainRun z1default = train({"--zero", "1"}, 6);
  ASSERT_EQ(z1default.proc.exit_code, 0) << z1default.proc.output;
  EXPECT_EQ(losses(z1default), losses(z1a));
  // With its CPU offload the ZeRO optimizer's partitions skip the Muon update too: stage 0's run.
  const TrainRun z1off = train({"--zero", "1", "--momentum", "0.95", "--offload-optimizer"}, 6);
  ASSERT_EQ(z1off.proc.exit_code, 0) << z1off.proc.output;
  EXPECT_EQ(losses(z1off), losses(z0a));
}

TEST(Muon, LayoutsNotModelledAreRefusedNamingTheOption) {
  for (const auto& [args, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--zero", "2"}, "ZeRO stages 0 and 1 (this run: 2; allowed: 0 or 1)"},
           {{"--precision", "bf16"}, "fp32 only (allowed: workload.precision fp32"},
           {{"--save-dir", "ckpt"}, "runs without checkpoints"},
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
