// Every fl::ops kernel on a GPU against the CPU kernel on the same inputs, the device allocator on
// real device memory, and a sticky CUDA error ending the process with its message. Skips without
// a CUDA device.
//
// Tolerances: element-wise kernels compute the same fp32 formula and agree to 1e-6 relative
// (tanhf/expf may differ from glibc by an ulp or two), except GELU backward, whose cancellation
// near th = -1 needs an absolute bound from its conditioning (expect_gelu_backward_close);
// GEMM-based ops sum in another order (cuBLAS vs OpenBLAS blocking), which moves fp32 results by
// ~1e-6 of the magnitudes summed, so they get 1e-5 of the largest |value| of the output; reductions
// in double agree to 1e-9 relative; rounding to fp16/bf16 and back is bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>

#include "kernels/cuda/fill.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kernels/device.hpp"
#include "kernels/ops.hpp"
#include "kernels/tensor.hpp"
#include "tests/support/close.hpp"
#include "tests/support/random.hpp"

namespace fl {
namespace {

const Device kGpu = Device::cuda(0);

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

using test::randn;

// A device copy of host data, and back.
template <class T>
Tensor up(const std::vector<T>& h, DType t = DType::kF32) {
  DeviceGuard g(kGpu);
  Tensor d = Tensor::zeros({static_cast<int64_t>(h.size())}, t, "test", MemoryAccountant::cuda(0));
  ops::from_host(d.raw(), h.data(), h.size() * sizeof(T));
  return d;
}
template <class T = float>
std::vector<T> down(const Tensor& d) {
  DeviceGuard g(kGpu);
  std::vector<T> h(d.numel());
  ops::to_host(h.data(), d.raw(), h.size() * sizeof(T));
  return h;
}

// GELU backward, dinp += (0.5·(1 + th) + 0.5·x·(1 - th²)·du)·dout with th = tanh(u),
// u = k·(x + 0.044715·x³), du = k·(1 + 3·0.044715·x²). CUDA's tanhf and glibc's are each within
// 2 ulp of tanh, and nvcc contracts u's polynomial into FMAs where gcc does not, so th differs by
// up to a few units of 2^-24 (th's ulp near ±1), budgeted as 8. The result moves by
// |∂/∂th|·|dout|·δth = |0.5 - x·th·du|·|dout|·δth ≤ (0.5 + |x·du|)·|dout|·δth, and each of its two
// terms (≤ 1 and ≤ 0.5·|x·du|) and the final += carry a few fp32 roundings (8 units of 2^-24 of
// their magnitudes). A relative bound does not fit: where th → -1 the terms 1 + th and 1 - th²
// cancel and one ulp of th is a large relative error of a small result (the H100 run: 0.24401441
// vs 0.24401394, 2e-6 relative).
void expect_gelu_backward_close(const std::vector<float>& got, const std::vector<float>& want,
                                const std::vector<float>& x, const std::vector<float>& dout) {
  ASSERT_EQ(got.size(), want.size());
  constexpr double kUnits = 8.0 / (1 << 24);
  constexpr double k = 0.7978845608028654, c = 0.044715;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double xi = x[i], du = k * (1 + 3 * c * xi * xi);
    const double tol =
        kUnits * ((1.5 + 1.5 * std::fabs(xi * du)) * std::fabs(dout[i]) + std::fabs(want[i]));
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << "gelu_backward[" << i << "] (x " << xi << ", dout " << dout[i] << "): gpu "
                    << got[i] << ", reference " << want[i] << ", bound " << tol;
    }
  }
  EXPECT_EQ(bad, 0u) << "gelu_backward";
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  const char* what, bool relative_to_max = false) {
  test::expect_all_close(got, want, rel, what, relative_to_max, "gpu");
}

constexpr int B = 2, T = 16, C = 64, NH = 4, V = 96, N = B * T;

TEST_F(CudaOps, Embedding) {
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 37) % V;
  auto wte = randn(V * C, 1), wpe = randn(T * C, 2), dout = randn(N * C, 3);
  std::vector<float> out(N * C), dwte(V * C, 0.5f), dwpe(T * C, -0.5f);
  ops::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  ops::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  Tensor gt = up(tok, DType::kI32), gwte = up(wte), gwpe = up(wpe),
         gout = up(std::vector<float>(N * C)), gdout = up(dout),
         gdwte = up(std::vector<float>(V * C, 0.5f)), gdwpe = up(std::vector<float>(T * C, -0.5f));
  {
    DeviceGuard g(kGpu);
    ops::embedding_forward(gout.f32(), gt.data<int32_t>(), gwte.f32(), gwpe.f32(), B, T, C);
    ops::embedding_backward(gdwte.f32(), gdwpe.f32(), gdout.f32(), gt.data<int32_t>(), B, T, C);
  }
  expect_close(down(gout), out, 1e-6, "embedding_forward");
  expect_close(down(gdwte), dwte, 1e-5, "embedding_backward dwte", true);  // atomics: any order
  expect_close(down(gdwpe), dwpe, 1e-6, "embedding_backward dwpe");
}

TEST_F(CudaOps, Linear) {
  const int OC = 3 * C;
  auto inp = randn(N * C, 4), w = randn(OC * C, 5, 0.1f), b = randn(OC, 6), dout = randn(N * OC, 7);
  std::vector<float> out(N * OC), dinp(N * C, 0.25f), dw(OC * C, 0.0f), db(OC, 1.0f);
  ops::linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  ops::linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
  Tensor ginp = up(inp), gw = up(w), gb = up(b), gdout = up(dout),
         gout = up(std::vector<float>(N * OC)), gdinp = up(std::vector<float>(N * C, 0.25f)),
         gdw = up(std::vector<float>(OC * C)), gdb = up(std::vector<float>(OC, 1.0f));
  {
    DeviceGuard g(kGpu);
    ops::linear_forward(gout.f32(), ginp.f32(), gw.f32(), gb.f32(), N, C, OC);
    ops::linear_backward(gdinp.f32(), gdw.f32(), gdb.f32(), gdout.f32(), ginp.f32(), gw.f32(), N, C,
                         OC);
  }
  expect_close(down(gout), out, 1e-5, "linear_forward", true);
  expect_close(down(gdinp), dinp, 1e-5, "linear_backward dinp", true);
  expect_close(down(gdw), dw, 1e-5, "linear_backward dweight", true);
  expect_close(down(gdb), db, 1e-5, "linear_backward dbias", true);
}

TEST_F(CudaOps, LayerNorm) {
  auto inp = randn(N * C, 8, 2.0f), w = randn(C, 9), b = randn(C, 10), dout = randn(N * C, 11);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.1f), dw(C, 0.0f), db(C, 0.0f);
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                         C);
  ops::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  Tensor ginp = up(inp), gw = up(w), gb = up(b), gdout = up(dout),
         gout = up(std::vector<float>(N * C)), gmean = up(std::vector<float>(N)),
         grstd = up(std::vector<float>(N)), gdinp = up(std::vector<float>(N * C, 0.1f)),
         gdw = up(std::vector<float>(C)), gdb = up(std::vector<float>(C));
  {
    DeviceGuard g(kGpu);
    ops::layernorm_forward(gout.f32(), gmean.f32(), grstd.f32(), ginp.f32(), gw.f32(), gb.f32(), N,
                           C);
    ops::layernorm_backward(gdinp.f32(), gdw.f32(), gdb.f32(), gdout.f32(), ginp.f32(), gw.f32(),
                            gmean.f32(), grstd.f32(), N, C);
  }
  expect_close(down(gout), out, 1e-5, "layernorm_forward", true);
  expect_close(down(gmean), mean, 1e-5, "layernorm mean", true);
  expect_close(down(grstd), rstd, 1e-5, "layernorm rstd");
  expect_close(down(gdinp), dinp, 1e-5, "layernorm_backward dinp", true);
  expect_close(down(gdw), dw, 1e-5, "layernorm_backward dweight", true);
  expect_close(down(gdb), db, 1e-5, "layernorm_backward dbias", true);
}

TEST_F(CudaOps, GeluResidualScaleAdamW) {
  const size_t n = 5000;
  auto x = randn(n, 12, 3.0f), dout = randn(n, 13), y = randn(n, 14);
  std::vector<float> out(n), dinp(n, 0.5f), res(n), da(n, 1.0f), db(n, 2.0f);
  ops::gelu_forward(out.data(), x.data(), n);
  ops::gelu_backward(dinp.data(), x.data(), dout.data(), n);
  ops::residual_forward(res.data(), x.data(), y.data(), n);
  ops::residual_backward(da.data(), db.data(), dout.data(), n);
  auto p = randn(n, 15), m = randn(n, 16, 0.01f), v = randn(n, 17, 0.01f);
  for (auto& e : v) e = std::fabs(e);
  auto pc = p, mc = m, vc = v;
  ops::AdamW hp{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  ops::adamw_update(pc.data(), dout.data(), mc.data(), vc.data(), n, 7, hp);
  auto sc = x;
  ops::scale(sc.data(), n, 0.37f);
  Tensor gx = up(x), gdout = up(dout), gy = up(y), gout = up(std::vector<float>(n)),
         gdinp = up(std::vector<float>(n, 0.5f)), gres = up(std::vector<float>(n)),
         gda = up(std::vector<float>(n, 1.0f)), gdb = up(std::vector<float>(n, 2.0f)), gp = up(p),
         gm = up(m), gv = up(v), gsc = up(x);
  {
    DeviceGuard g(kGpu);
    ops::gelu_forward(gout.f32(), gx.f32(), n);
    ops::gelu_backward(gdinp.f32(), gx.f32(), gdout.f32(), n);
    ops::residual_forward(gres.f32(), gx.f32(), gy.f32(), n);
    ops::residual_backward(gda.f32(), gdb.f32(), gdout.f32(), n);
    ops::adamw_update(gp.f32(), gdout.f32(), gm.f32(), gv.f32(), n, 7, hp);
    ops::scale(gsc.f32(), n, 0.37f);
  }
  expect_close(down(gout), out, 1e-6, "gelu_forward");
  expect_gelu_backward_close(down(gdinp), dinp, x, dout);
  expect_close(down(gres), res, 0, "residual_forward");
  expect_close(down(gda), da, 0, "residual_backward da");
  expect_close(down(gdb), db, 0, "residual_backward db");
  expect_close(down(gp), pc, 1e-6, "adamw param");
  expect_close(down(gm), mc, 1e-6, "adamw exp_avg");
  expect_close(down(gv), vc, 1e-6, "adamw exp_avg_sq");
  expect_close(down(gsc), sc, 0, "scale");
}

TEST_F(CudaOps, Attention) {
  auto qkv = randn(N * 3 * C, 18), dout = randn(N * C, 19);
  std::vector<float> out(N * C), att(B * NH * T * T), dqkv(N * 3 * C, 0.0f);
  ops::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  ops::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  Tensor gqkv = up(qkv), gdout = up(dout), gout = up(std::vector<float>(N * C)),
         gatt = up(std::vector<float>(B * NH * T * T)), gdqkv = up(std::vector<float>(N * 3 * C));
  {
    DeviceGuard g(kGpu);
    ops::attention_forward(gout.f32(), gatt.f32(), gqkv.f32(), B, T, C, NH);
    ops::attention_backward(gdqkv.f32(), gdout.f32(), gqkv.f32(), gatt.f32(), B, T, C, NH);
  }
  expect_close(down(gatt), att, 1e-5, "attention probabilities", true);
  expect_close(down(gout), out, 1e-5, "attention_forward", true);
  expect_close(down(gdqkv), dqkv, 1e-5, "attention_backward", true);
}

TEST_F(CudaOps, KvDecodeAttention) {
  const int H = 4, hs = 16, Tc = 12, Cl = H * hs;
  auto kc = randn(B * H * Tc * hs, 30), vc = randn(B * H * Tc * hs, 31);
  for (int t : {0, 5, Tc - 1}) {
    for (int window : {0, 4}) {
      auto qkv = randn(B * 3 * Cl, 32 + t);
      std::vector<float> out(B * Cl), k = kc, v = vc;
      ops::kv_decode_attention(out.data(), k.data(), v.data(), qkv.data(), B, H, Tc, hs, t, window);
      Tensor gq = up(qkv), gk = up(kc), gv = up(vc), gout = up(std::vector<float>(B * Cl));
      {
        DeviceGuard g(kGpu);
        ops::kv_decode_attention(gout.f32(), gk.f32(), gv.f32(), gq.f32(), B, H, Tc, hs, t, window);
      }
      expect_close(down(gout), out, 1e-5, "kv_decode_attention out", true);
      expect_close(down(gk), k, 0, "kv_decode_attention k cache");
      expect_close(down(gv), v, 0, "kv_decode_attention v cache");
    }
  }
}

TEST_F(CudaOps, SoftmaxCrossEntropyAndLossSum) {
  auto logits = randn(N * V, 20, 2.0f);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = i % 5 == 4 ? -1 : (i * 11) % V;  // some ignored
  std::vector<float> losses(N), probs(N * V), dlogits(N * V, 0.0f);
  ops::softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
  ops::softmax_cross_entropy_backward(dlogits.data(), probs.data(), tgt.data(), 0.125f, N, V);
  int valid = 0;
  const double sum = ops::loss_sum(losses.data(), tgt.data(), N, &valid);
  Tensor gl = up(logits), gt = up(tgt, DType::kI32), glosses = up(std::vector<float>(N)),
         gd = up(std::vector<float>(N * V));
  int gvalid = 0;
  double gsum = 0;
  {
    DeviceGuard g(kGpu);
    // In place, as the model calls it: logits become probabilities.
    ops::softmax_cross_entropy_forward(glosses.f32(), gl.f32(), gl.f32(), gt.data<int32_t>(), N, V);
    ops::softmax_cross_entropy_backward(gd.f32(), gl.f32(), gt.data<int32_t>(), 0.125f, N, V);
    gsum = ops::loss_sum(glosses.f32(), gt.data<int32_t>(), N, &gvalid);
  }
  expect_close(down(gl), probs, 1e-6, "softmax probabilities", true);
  expect_close(down(glosses), losses, 1e-6, "cross-entropy losses");
  expect_close(down(gd), dlogits, 1e-6, "cross-entropy backward", true);
  EXPECT_EQ(gvalid, valid);
  EXPECT_NEAR(gsum, sum, 1e-6 * std::fabs(sum));
}

TEST_F(CudaOps, BiasReductionsAndFlags) {
  auto x = randn(N * C, 21), bias = randn(C, 22);
  std::vector<float> out = x, db(C, 0.5f);
  ops::add_bias(out.data(), bias.data(), N, C);
  ops::bias_backward(db.data(), x.data(), N, C);
  std::vector<uint8_t> skip(N * C);
  for (size_t i = 0; i < skip.size(); ++i) skip[i] = i % 3 == 0;
  const double ss = ops::sum_of_squares(x.data(), x.size());
  const double mss = ops::masked_sum_of_squares(x.data(), skip.data(), x.size(), 1024.0);
  Tensor gout = up(x), gb = up(bias), gx = up(x), gdb = up(std::vector<float>(C, 0.5f)),
         gskip = up(skip, DType::kU8);
  std::vector<float> with_inf = x;
  with_inf[N * C - 3] = std::numeric_limits<float>::infinity();
  std::vector<float> with_nan = x;
  with_nan[7] = std::numeric_limits<float>::quiet_NaN();
  Tensor ginf = up(with_inf), gnan = up(with_nan);
  DeviceGuard g(kGpu);
  ops::add_bias(gout.f32(), gb.f32(), N, C);
  ops::bias_backward(gdb.f32(), gx.f32(), N, C);
  EXPECT_NEAR(ops::sum_of_squares(gx.f32(), x.size()), ss, 1e-9 * ss);
  EXPECT_NEAR(ops::masked_sum_of_squares(gx.f32(), gskip.data<uint8_t>(), x.size(), 1024.0), mss,
              1e-9 * mss);
  EXPECT_FALSE(ops::has_non_finite(gx.f32(), x.size()));
  EXPECT_TRUE(ops::has_non_finite(ginf.f32(), x.size()));
  EXPECT_TRUE(ops::has_non_finite(gnan.f32(), x.size()));
  expect_close(down(gout), out, 0, "add_bias");
  expect_close(down(gdb), db, 1e-6, "bias_backward", true);
}

// Past the grid's 1024 x 256 threads each thread sums several elements, four loads at a time,
// some past the end: every kept element counts once and a skipped NaN stays out.
TEST_F(CudaOps, SumOfSquaresOverManyElementsPerThread) {
  auto big = randn(2 * 1024 * 256 + 4097, 24);
  std::vector<uint8_t> skip(big.size());
  for (size_t i = 0; i < big.size(); i += 5) skip[i] = 1;
  big[big.size() - 5] = std::numeric_limits<float>::quiet_NaN();
  const double want = ops::masked_sum_of_squares(big.data(), skip.data(), big.size(), 3.0);
  ASSERT_TRUE(std::isfinite(want));
  Tensor gbig = up(big), gskip = up(skip, DType::kU8);
  DeviceGuard g(kGpu);
  EXPECT_NEAR(ops::masked_sum_of_squares(gbig.f32(), gskip.data<uint8_t>(), big.size(), 3.0), want,
              1e-9 * want);
}

TEST_F(CudaOps, RoundingToSixteenBitFormatsIsBitwiseTheCpus) {
  auto x = randn(4096, 23, 100.0f);
  x[0] = 70000.0f;   // above fp16's range: inf
  x[1] = -65519.0f;  // rounds to -65504
  x[2] = 1e-8f;      // fp16 subnormal territory
  x[3] = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {DType::kF16, DType::kBF16}) {
    auto want = x;
    ops::round_to_precision(want.data(), want.size(), t);
    std::vector<uint16_t> enc(x.size());
    ops::encode(x.data(), enc.data(), t, x.size());
    Tensor g = up(x), gsrc = up(x), genc = up(std::vector<uint16_t>(x.size()), t),
           gdec = up(std::vector<float>(x.size()));
    {
      DeviceGuard d(kGpu);
      ops::round_to_precision(g.f32(), x.size(), t);
      ops::encode(gsrc.f32(), genc.raw(), t, x.size());
      ops::decode(genc.raw(), t, gdec.f32(), x.size());
    }
    auto got = down(g);
    auto genc_h = down<uint16_t>(genc);
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
        continue;
      }
      EXPECT_EQ(got[i], want[i]) << dtype_name(t) << " element " << i << " of " << x[i];
      EXPECT_EQ(genc_h[i], enc[i]) << dtype_name(t) << " encoding of " << x[i];
    }
    expect_close(down(gdec), want, 0, "decode");
  }
}

TEST_F(CudaOps, AllocatorBudgetAndDeviceRefusalGiveTheAccountantsError) {
  DeviceGuard g(kGpu);
  MemoryAccountant small(1 << 20, 0, kGpu);
  try {
    Tensor::zeros({1 << 20}, DType::kF32, "act.too_big", small);
    FAIL() << "4 MiB fitted a 1 MiB budget";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on cuda:0: tried to allocate 4.00 MiB for "
                                         "'act.too_big'"),
              std::string::npos)
        << e.what();
  }
  MemoryAccountant unlimited(0, 0, kGpu);
  try {
    Tensor::zeros({int64_t{1} << 48}, DType::kF32, "params.huge", unlimited);  // 1 PiB
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory on cuda:0: tried to allocate 1048576.00 GiB"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("cudaMalloc of"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cudaErrorMemoryAllocation"), std::string::npos) << msg;
  }
  EXPECT_EQ(unlimited.current(), 0u);
  // The device still works after a refused allocation (the error is not sticky).
  Tensor ok = Tensor::zeros({256}, DType::kF32, "ok", unlimited);
  EXPECT_FALSE(ops::has_non_finite(ok.f32(), 256));
}

// A kernel that faults leaves the context unusable: the error surfaces at the next synchronising
// call as a sticky CudaError naming rank and device, and the process must end (here in a child).
TEST_F(CudaOps, StickyErrorEndsTheProcessWithItsMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        DeviceGuard g(kGpu);
        fl::cuda::store_through(reinterpret_cast<float*>(0x10));
        try {
          ops::synchronize();
        } catch (const CudaError& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(e.sticky() ? 29 : 1);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(29),
      "CUDA error on cuda:0 in cudaDeviceSynchronize: cudaErrorIllegalAddress.*this error is "
      "sticky");
}

}  // namespace
}  // namespace fl
