// Every backward kernel against central finite differences of its forward; forwards against
// naive reference loops; AdamW against a hand-computed step.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/support/random.hpp"

namespace fl::ops {
namespace {

using test::randn;

// f(x) = Σ w · forward(x); checks d f / d x[i] for every i of `x` (tiny sizes) against
// central differences computed in float with step eps.
void check_grad(std::vector<float>& x, const std::vector<float>& analytic,
                const std::function<double()>& f, const char* what, float eps = 1e-2f,
                float tol = 2e-2f) {
  ASSERT_EQ(x.size(), analytic.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + eps;
    double up = f();
    x[i] = keep - eps;
    double down = f();
    x[i] = keep;
    double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], numeric, tol * std::max(1.0, std::fabs(numeric)))
        << what << " element " << i;
  }
}

double weighted_sum(const std::vector<float>& out, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * w[i];
  return s;
}

TEST(Linear, ForwardMatchesNaiveLoop) {
  const int N = 5, C = 7, OC = 3;
  auto inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3);
  std::vector<float> out(N * OC);
  linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double ref = b[o];
      for (int c = 0; c < C; ++c) ref += static_cast<double>(inp[n * C + c]) * w[o * C + c];
      EXPECT_NEAR(out[n * OC + o], ref, 1e-5);
    }
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int N = 3, C = 4, OC = 5;
  auto inp = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), wsum = randn(N * OC, 4);
  std::vector<float> dinp(N * C), dw(OC * C), db(OC);
  linear_backward(dinp.data(), dw.data(), db.data(), wsum.data(), inp.data(), w.data(), N, C, OC);
  auto f = [&] {
    std::vector<float> out(N * OC);
    linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return weighted_sum(out, wsum);
  };
  check_grad(inp, dinp, f, "dinp");
  check_grad(w, dw, f, "dweight");
  check_grad(b, db, f, "dbias");
}

TEST(LayerNorm, NormalisesRowsAndBackwardMatches) {
  const int N = 3, C = 6;
  auto inp = randn(N * C, 5, 2.0f), w = randn(C, 6), b = randn(C, 7), wsum = randn(N * C, 8);
  std::vector<float> out(N * C), mean(N), rstd(N);
  std::vector<float> ones(C, 1.0f), zeros(C, 0.0f);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), ones.data(), zeros.data(), N,
                    C);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[n * C + c];
    for (int c = 0; c < C; ++c) v += out[n * C + c] * out[n * C + c];
    EXPECT_NEAR(m / C, 0.0, 1e-5);
    EXPECT_NEAR(v / C, 1.0, 1e-3);
  }
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  std::vector<float> dinp(N * C), dw(C), db(C);
  layernorm_backward(dinp.data(), dw.data(), db.data(), wsum.data(), inp.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  auto f = [&] {
    std::vector<float> o(N * C), mm(N), rr(N);
    layernorm_forward(o.data(), mm.data(), rr.data(), inp.data(), w.data(), b.data(), N, C);
    return weighted_sum(o, wsum);
  };
  check_grad(inp, dinp, f, "dinp");
  check_grad(w, dw, f, "dweight");
  check_grad(b, db, f, "dbias");
}

TEST(Gelu, BackwardMatches) {
  auto inp = randn(20, 9, 2.0f), wsum = randn(20, 10);
  std::vector<float> dinp(20);
  gelu_backward(dinp.data(), inp.data(), wsum.data(), 20);
  auto f = [&] {
    std::vector<float> o(20);
    gelu_forward(o.data(), inp.data(), 20);
    return weighted_sum(o, wsum);
  };
  check_grad(inp, dinp, f, "dinp", 1e-3f);
  std::vector<float> o(3);
  float x[3] = {0.0f, 10.0f, -10.0f};
  gelu_forward(o.data(), x, 3);
  EXPECT_FLOAT_EQ(o[0], 0.0f);
  EXPECT_NEAR(o[1], 10.0f, 1e-4);
  EXPECT_NEAR(o[2], 0.0f, 1e-4);
}

TEST(Attention, IsCausalAndBackwardMatches) {
  const int B = 2, T = 4, C = 6, NH = 2;
  auto qkv = randn(B * T * 3 * C, 11), wsum = randn(B * T * C, 12);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < T; ++t) {
        double sum = 0;
        for (int s = 0; s < T; ++s) {
          float a = att[((b * NH + h) * T + t) * T + s];
          if (s > t) {
            EXPECT_EQ(a, 0.0f) << "attention to the future";
          }
          sum += a;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
  // Position 0 attends only to itself: its output is its own value vector.
  for (int c = 0; c < C; ++c) EXPECT_NEAR(out[c], qkv[2 * C + c], 1e-5);
  std::vector<float> dqkv(qkv.size());
  attention_backward(dqkv.data(), wsum.data(), qkv.data(), att.data(), B, T, C, NH);
  auto f = [&] {
    std::vector<float> o(B * T * C), a(B * NH * T * T);
    attention_forward(o.data(), a.data(), qkv.data(), B, T, C, NH);
    return weighted_sum(o, wsum);
  };
  check_grad(qkv, dqkv, f, "dqkv");
}

TEST(Embedding, ForwardAndBackwardAccumulatePerToken) {
  const int B = 1, T = 3, C = 2, V = 4;
  std::vector<int32_t> tok = {2, 2, 0};
  auto wte = randn(V * C, 13), wpe = randn(T * C, 14);
  std::vector<float> out(B * T * C);
  embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_FLOAT_EQ(out[1 * C + 1], wte[2 * C + 1] + wpe[1 * C + 1]);
  std::vector<float> dout(B * T * C, 1.0f), dwte(V * C), dwpe(T * C);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  EXPECT_FLOAT_EQ(dwte[2 * C], 2.0f);  // token 2 appears twice
  EXPECT_FLOAT_EQ(dwte[0], 1.0f);
  EXPECT_FLOAT_EQ(dwte[1 * C], 0.0f);
  EXPECT_FLOAT_EQ(dwpe[2 * C + 1], 1.0f);
}

TEST(CrossEntropy, LossAndBackwardMatch) {
  const int N = 3, V = 5;
  auto logits = randn(N * V, 15, 3.0f);
  std::vector<int32_t> tgt = {1, 4, -1};  // the last position is ignored
  std::vector<float> losses(N), probs(N * V);
  softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
  EXPECT_EQ(losses[2], 0.0f);
  double lse = 0;
  for (int i = 0; i < V; ++i) lse += std::exp(static_cast<double>(logits[i]));
  EXPECT_NEAR(losses[0], std::log(lse) - logits[1], 1e-5);
  std::vector<float> dlogits(N * V);
  softmax_cross_entropy_backward(dlogits.data(), probs.data(), tgt.data(), 0.5f, N, V);
  auto f = [&] {
    std::vector<float> l(N), p(N * V);
    softmax_cross_entropy_forward(l.data(), p.data(), logits.data(), tgt.data(), N, V);
    return 0.5 * (l[0] + l[1] + l[2]);
  };
  check_grad(logits, dlogits, f, "dlogits", 1e-2f);
}

TEST(AdamW, OneStepByHand) {
  float p = 1.0f, g = 0.5f, m = 0, v = 0;
  AdamW hp;
  hp.lr = 0.1f;
  hp.weight_decay = 0.01f;
  adamw_update(&p, &g, &m, &v, 1, 1, hp);
  // Step 1: m̂ = g, v̂ = g², update = g/|g| = 1 (+ eps), plus decay lr·wd·p.
  EXPECT_NEAR(p, 1.0f - 0.1f * (1.0f + 0.01f * 1.0f), 1e-6);
  EXPECT_NEAR(m, 0.05f, 1e-7);
  EXPECT_NEAR(v, 0.05f * 0.25f, 1e-7);
}

TEST(Norms, SumOfSquaresScaleAndNonFinite) {
  std::vector<float> x = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(sum_of_squares(x.data(), 2), 25.0);
  scale(x.data(), 2, 0.5f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_FALSE(has_non_finite(x.data(), 2));
  x[0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(has_non_finite(x.data(), 2));
  x[0] = std::nanf("");
  EXPECT_TRUE(has_non_finite(x.data(), 2));
}

}  // namespace
}  // namespace fl::ops
