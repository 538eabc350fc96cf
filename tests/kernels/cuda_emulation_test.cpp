// The CUDA kernels of kernels/cuda/kernels.cu, compiled as C++ against a CPU emulation of the
// execution model (tests/kernels/cuda_emulation.hpp), run on host memory and compared with the CPU
// ops — on every machine, GPU or not. With the GEMMs done by a reference of cuBLAS's semantics,
// linear and attention run through the CUDA path's own layout (gemm_plan.hpp) and kernels. What
// this cannot check (the hardware, cuBLAS itself, real concurrency between blocks) the gpu-labelled
// cuda_ops_test does on a device.
//
// Tolerances as in cuda_ops_test: element-wise 1e-6 relative; reductions whose summation order
// differs (warp trees, row chunks) 1e-5 of the output's largest magnitude; rounding bitwise.
#include "tests/kernels/cuda_emulation.hpp"
// The kernels themselves, as C++ (after the emulation's definitions), in a namespace of their own
// so that they cannot meet the real launchers of a CUDA build's libraries.
namespace emulated {
#include "kernels/cuda/kernels.cu"
#include "kernels/cuda/numerics.cu"
}  // namespace emulated

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "kernels/cuda/gemm_plan.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/cublas_reference.hpp"
#include "tests/support/close.hpp"
#include "tests/support/random.hpp"

namespace emulated::fl::cuda {
void check_launch(const char*) {}  // an emulated launch has nothing to report
}  // namespace emulated::fl::cuda

namespace fl {
namespace {

namespace launch = emulated::fl::cuda::launch;
using test::randn;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  const char* what, bool relative_to_max = false) {
  test::expect_all_close(got, want, rel, what, relative_to_max, "emulated");
}

// Rows not a multiple of a block's 8 warps, widths and causal rows longer than a warp and not a
// multiple of it.
constexpr int B = 2, T = 37, C = 48, NH = 4, V = 70, N = B * T;

TEST(CudaEmulation, EmbeddingForwardAndBackward) {
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 37) % V;
  tok[3] = tok[9];  // a repeated token: its gradient rows add up
  auto wte = randn(V * C, 1), wpe = randn(T * C, 2), dout = randn(N * C, 3);
  std::vector<float> out(N * C), dwte(V * C, 0.5f), dwpe(T * C, -0.5f);
  ops::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  ops::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  std::vector<float> eout(N * C), edwte(V * C, 0.5f), edwpe(T * C, -0.5f);
  launch::embedding_forward(eout.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  launch::embedding_backward(edwte.data(), edwpe.data(), dout.data(), tok.data(), B, T, C);
  expect_close(eout, out, 0, "embedding_forward");
  expect_close(edwte, dwte, 1e-6, "embedding_backward dwte");
  expect_close(edwpe, dwpe, 1e-6, "embedding_backward dwpe");
  // Either gradient may be null (a vocab-parallel embedding writes them in two calls): the other
  // takes the same sums, on both devices.
  std::vector<float> only_wte(V * C, 0.5f), only_wpe(T * C, -0.5f);
  std::vector<float> eonly_wte(V * C, 0.5f), eonly_wpe(T * C, -0.5f);
  ops::embedding_backward(only_wte.data(), nullptr, dout.data(), tok.data(), B, T, C);
  ops::embedding_backward(nullptr, only_wpe.data(), dout.data(), tok.data(), B, T, C);
  launch::embedding_backward(eonly_wte.data(), nullptr, dout.data(), tok.data(), B, T, C);
  launch::embedding_backward(nullptr, eonly_wpe.data(), dout.data(), tok.data(), B, T, C);
  expect_close(only_wte, dwte, 0, "embedding_backward dwte alone");
  expect_close(only_wpe, dwpe, 0, "embedding_backward dwpe alone");
  expect_close(eonly_wte, dwte, 1e-6, "emulated embedding_backward dwte alone");
  expect_close(eonly_wpe, dwpe, 1e-6, "emulated embedding_backward dwpe alone");
}

TEST(CudaEmulation, LayerNormForwardAndBackward) {
  auto inp = randn(N * C, 4, 2.0f), w = randn(C, 5), b = randn(C, 6), dout = randn(N * C, 7);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.1f), dw(C, 0.2f), db(C, 0.3f);
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                         C);
  ops::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  std::vector<float> eout(N * C), emean(N), erstd(N), edinp(N * C, 0.1f), edw(C, 0.2f),
      edb(C, 0.3f), scratch(2 * launch::column_scratch(N, C), 99.0f);
  launch::layernorm_forward(eout.data(), emean.data(), erstd.data(), inp.data(), w.data(), b.data(),
                            N, C);
  launch::layernorm_backward(edinp.data(), edw.data(), edb.data(), dout.data(), inp.data(),
                             w.data(), emean.data(), erstd.data(), N, C, scratch.data());
  expect_close(eout, out, 1e-5, "layernorm_forward", true);
  expect_close(emean, mean, 1e-5, "layernorm mean", true);
  expect_close(erstd, rstd, 1e-5, "layernorm rstd");
  expect_close(edinp, dinp, 1e-5, "layernorm_backward dinp", true);
  expect_close(edw, dw, 1e-5, "layernorm_backward dweight", true);
  expect_close(edb, db, 1e-5, "layernorm_backward dbias", true);
}

TEST(CudaEmulation, ElementwiseKernels) {
  const size_t n = 1000;
  auto x = randn(n, 8, 3.0f), y = randn(n, 9), dout = randn(n, 10);
  std::vector<float> g(n), dg(n, 0.5f), r(n), da(n, 1.0f), db(n, 2.0f), sc = x;
  ops::gelu_forward(g.data(), x.data(), n);
  ops::gelu_backward(dg.data(), x.data(), dout.data(), n);
  ops::residual_forward(r.data(), x.data(), y.data(), n);
  ops::residual_backward(da.data(), db.data(), dout.data(), n);
  ops::scale(sc.data(), n, 0.37f);
  std::vector<float> eg(n), edg(n, 0.5f), er(n), eda(n, 1.0f), edb(n, 2.0f), esc = x;
  launch::gelu_forward(eg.data(), x.data(), n);
  launch::gelu_backward(edg.data(), x.data(), dout.data(), n);
  launch::residual_forward(er.data(), x.data(), y.data(), n);
  launch::residual_backward(eda.data(), edb.data(), dout.data(), n);
  launch::scale(esc.data(), n, 0.37f);
  expect_close(eg, g, 0, "gelu_forward");
  expect_close(edg, dg, 0, "gelu_backward");
  expect_close(er, r, 0, "residual_forward");
  expect_close(eda, da, 0, "residual_backward da");
  expect_close(edb, db, 0, "residual_backward db");
  expect_close(esc, sc, 0, "scale");
}

TEST(CudaEmulation, AdamW) {
  const size_t n = 700;
  auto p = randn(n, 11), grad = randn(n, 12), m = randn(n, 13, 0.01f), v = randn(n, 14, 0.01f);
  for (auto& e : v) e = std::fabs(e);
  auto pc = p, mc = m, vc = v;
  ops::AdamW hp{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  ops::adamw_update(pc.data(), grad.data(), mc.data(), vc.data(), n, 7, hp);
  const float c1 = 1.0f - std::pow(hp.beta1, 7.0f), c2 = 1.0f - std::pow(hp.beta2, 7.0f);
  launch::adamw(p.data(), grad.data(), m.data(), v.data(), n, hp.lr, hp.beta1, hp.beta2, hp.eps,
                hp.weight_decay, c1, c2);
  expect_close(p, pc, 0, "adamw param");
  expect_close(m, mc, 0, "adamw exp_avg");
  expect_close(v, vc, 0, "adamw exp_avg_sq");
}

TEST(CudaEmulation, Sgd) {
  const size_t n = 700;
  for (float momentum : {0.0f, 0.9f}) {
    auto p = randn(n, 21), grad = randn(n, 22), buf = randn(n, 23, 0.01f);
    auto pc = p, bufc = buf;
    ops::Sgd hp{0.05f, momentum, 0.01f};
    ops::sgd_update(pc.data(), grad.data(), bufc.data(), n, hp);
    launch::sgd(p.data(), grad.data(), buf.data(), n, hp.lr, hp.momentum, hp.weight_decay);
    expect_close(p, pc, 0, "sgd param");
    expect_close(buf, bufc, 0, "sgd momentum buffer");
  }
}

TEST(CudaEmulation, SoftmaxCrossEntropyAndReductions) {
  auto logits = randn(N * V, 15, 2.0f);
  std::vector<int32_t> tgt(N);
  for (int i = 0; i < N; ++i) tgt[i] = i % 5 == 4 ? -1 : (i * 11) % V;
  std::vector<float> losses(N), probs(N * V), dl(N * V, 0.0f);
  ops::softmax_cross_entropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
  ops::softmax_cross_entropy_backward(dl.data(), probs.data(), tgt.data(), 0.125f, N, V);
  int valid = 0;
  const double sum = ops::loss_sum(losses.data(), tgt.data(), N, &valid);
  std::vector<float> el(N), ep = logits, edl(N * V, 0.0f);
  launch::softmax_xent_forward(el.data(), ep.data(), ep.data(), tgt.data(), N, V);  // in place
  launch::softmax_xent_backward(edl.data(), ep.data(), tgt.data(), 0.125f, N, V);
  double esum = 0;
  int evalid = 0;
  launch::loss_sum(el.data(), tgt.data(), N, &esum, &evalid);
  expect_close(ep, probs, 1e-6, "softmax probabilities", true);
  expect_close(el, losses, 1e-6, "cross-entropy losses");
  expect_close(edl, dl, 1e-6, "cross-entropy backward", true);
  EXPECT_EQ(evalid, valid);
  EXPECT_NEAR(esum, sum, 1e-9 * sum);

  auto x = randn(3000, 16);
  std::vector<uint8_t> skip(x.size());
  for (size_t i = 0; i < skip.size(); ++i) skip[i] = i % 3 == 0;
  double ss = 0, mss = 0;
  launch::sum_of_squares(x.data(), nullptr, x.size(), 1.0, &ss);
  launch::sum_of_squares(x.data(), skip.data(), x.size(), 1024.0, &mss);
  EXPECT_NEAR(ss, ops::sum_of_squares(x.data(), x.size()), 1e-9 * ss);
  EXPECT_NEAR(mss, ops::masked_sum_of_squares(x.data(), skip.data(), x.size(), 1024.0), 1e-9 * mss);
  int flag = 0;
  launch::has_non_finite(x.data(), x.size(), &flag);
  EXPECT_EQ(flag, 0);
  x[2999] = std::numeric_limits<float>::quiet_NaN();
  launch::has_non_finite(x.data(), x.size(), &flag);
  EXPECT_EQ(flag, 1);
}

TEST(CudaEmulation, BiasAndSixteenBitFormats) {
  auto x = randn(N * C, 17), bias = randn(C, 18);
  std::vector<float> out = x, db(C, 0.5f), eout = x, edb(C, 0.5f),
                     scratch(launch::column_scratch(N, C));
  ops::add_bias(out.data(), bias.data(), N, C);
  ops::bias_backward(db.data(), x.data(), N, C);
  launch::add_bias(eout.data(), bias.data(), N, C);
  launch::bias_backward(edb.data(), x.data(), N, C, scratch.data());
  expect_close(eout, out, 0, "add_bias");
  expect_close(edb, db, 1e-6, "bias_backward", true);

  auto h = randn(1000, 19, 100.0f);
  h[0] = 70000.0f;
  h[1] = -65519.0f;
  for (DType t : {DType::kF16, DType::kBF16}) {
    auto want = h, got = h;
    ops::round_to_precision(want.data(), want.size(), t);
    launch::round_to(got.data(), got.size(), static_cast<int>(t));
    expect_close(got, want, 0, "round_to");
    std::vector<uint16_t> enc(h.size()), eenc(h.size());
    ops::encode(h.data(), enc.data(), t, h.size());
    launch::encode(h.data(), eenc.data(), static_cast<int>(t), h.size());
    EXPECT_EQ(eenc, enc);
    std::vector<float> dec(h.size());
    launch::decode(eenc.data(), static_cast<int>(t), dec.data(), h.size());
    expect_close(dec, want, 0, "decode");
  }
}

// Short caches and head sizes that are not a multiple of a warp, and the shape of the sanitizer
// run on the H100 (GPT-2 heads of 64, position 255 of 256: exactly 1024 bytes of scores): every
// shared-memory access is bounds-checked by the emulation.
TEST(CudaEmulation, KvDecodeAttention) {
  struct Shape {
    int H, hs, Tc;
    std::vector<int> positions;
  };
  for (const Shape& sh : {Shape{3, 20, 9, {0, 4, 8}}, Shape{2, 64, 256, {31, 32, 255}}}) {
    const int Cl = sh.H * sh.hs;
    auto kc = randn(B * sh.H * sh.Tc * sh.hs, 20), vc = randn(B * sh.H * sh.Tc * sh.hs, 21);
    for (int t : sh.positions) {
      for (int window : {0, 1, 5}) {  // full, the token alone, a sliding window
        auto qkv = randn(B * 3 * Cl, 22 + t);
        std::vector<float> out(B * Cl), k = kc, v = vc, eout(B * Cl), ek = kc, ev = vc;
        ops::kv_decode_attention(out.data(), k.data(), v.data(), qkv.data(), B, sh.H, sh.Tc, sh.hs,
                                 t, window);
        launch::kv_decode_attention(eout.data(), ek.data(), ev.data(), qkv.data(), B, sh.H, sh.Tc,
                                    sh.hs, t, window);
        expect_close(eout, out, 1e-5, "kv_decode_attention", true);
        expect_close(ek, k, 0, "k cache");
        expect_close(ev, v, 0, "v cache");
      }
    }
  }
}

// A sliding window of w positions at position t is full attention over the cache's last w
// positions: the same output as a cache holding only those, decoded at their last position (the
// kernel adds no position of its own).
TEST(CudaEmulation, KvDecodeWindowIsFullAttentionOverTheLastPositions) {
  const int H = 2, hs = 8, Tc = 12, Cl = H * hs, t = 9, window = 4, s0 = t - window + 1;
  auto kc = randn(B * H * Tc * hs, 40), vc = randn(B * H * Tc * hs, 41);
  auto qkv = randn(B * 3 * Cl, 42);
  std::vector<float> out(B * Cl), k = kc, v = vc;
  ops::kv_decode_attention(out.data(), k.data(), v.data(), qkv.data(), B, H, Tc, hs, t, window);
  std::vector<float> k2(kc.size(), 0.0f), v2(vc.size(), 0.0f), out2(B * Cl);
  for (int b = 0; b < B * H; ++b) {  // positions s0..t-1 moved to 0..window-2
    const size_t base = static_cast<size_t>(b) * Tc * hs;
    std::copy_n(kc.begin() + base + s0 * hs, (window - 1) * hs, k2.begin() + base);
    std::copy_n(vc.begin() + base + s0 * hs, (window - 1) * hs, v2.begin() + base);
  }
  ops::kv_decode_attention(out2.data(), k2.data(), v2.data(), qkv.data(), B, H, Tc, hs, window - 1,
                           0);
  expect_close(out2, out, 1e-6, "window against full attention over the last positions", true);
  std::vector<float> full(B * Cl), k3 = kc, v3 = vc;
  ops::kv_decode_attention(full.data(), k3.data(), v3.data(), qkv.data(), B, H, Tc, hs, t, 0);
  EXPECT_NE(full, out);  // the positions before the window did count without it
}

}  // namespace
}  // namespace fl

// Kernels broken on purpose: the emulation must catch their shared-memory accesses.
namespace broken {
// Threads 0 and 1 read one and two elements past the end of the dynamic shared memory.
__global__ void reads_past_dynamic_shared_k(float* out, int n) {
  FL_DYNAMIC_SHARED(float, buf);  // n floats
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = static_cast<float>(i);
  __syncthreads();
  if (threadIdx.x < 2) out[threadIdx.x] = buf[n + threadIdx.x];
}
// Warp 8 of a 9-warp block writes past a per-warp array sized for 8 warps.
__global__ void writes_past_static_shared_k(double* out) {
  FL_SHARED_ARRAY(double, part, 8);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = 1.0;
  __syncthreads();
  if (threadIdx.x == 0) *out = part[0];
}
// Lane 0 waits for the whole block while its warp's other lanes wait for the warp: neither barrier
// can open (on a GPU: a hang). The second warp gets through its __syncwarp and returns.
__global__ void mixed_barriers_k(int* reached) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    __syncwarp();
  }
  atomicAdd(reached, 1);
}
// Each lane of warp 1 meets its warp before the block: warps may pass their own barriers at
// different times, and threads that return drop out of the block's barrier.
__global__ void warp_then_block_k(int* out) {
  if (threadIdx.x < 32) return;
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncwarp();
  __syncthreads();
  out[64 + threadIdx.x] = out[32 + (threadIdx.x + 1) % 32];
}
}  // namespace broken

namespace fl {
namespace {

std::string shared_error(const std::function<void()>& launch) {
  try {
    launch();
  } catch (const emu::SharedMemoryError& e) {
    return e.what();
  }
  return "";
}

TEST(CudaEmulation, OutOfBoundsSharedMemoryFailsNamingKernelBlockAndThread) {
  std::vector<float> out(2);
  const std::string read = shared_error([&] {
    FL_LAUNCH(broken::reads_past_dynamic_shared_k, 2, 64, 256 * sizeof(float))(out.data(), 256);
  });
  EXPECT_NE(read.find("4 out-of-bounds shared-memory access(es) in "
                      "broken::reads_past_dynamic_shared_k"),
            std::string::npos)
      << read;
  for (const char* want :
       {"broken::reads_past_dynamic_shared_k: block (0,0,0) thread (0,0,0) reads buf[256], out of "
        "bounds of its 256 elements (1024 bytes of dynamic shared memory)",
        "block (0,0,0) thread (1,0,0) reads buf[257]",
        "block (1,0,0) thread (1,0,0) reads buf[257]"}) {
    EXPECT_NE(read.find(want), std::string::npos) << read;
  }
  double d = 0;
  const std::string write = shared_error([&] {
    FL_LAUNCH(broken::writes_past_static_shared_k, 1, 9 * 32, 0)
    (&d);
  });
  EXPECT_NE(
      write.find("broken::writes_past_static_shared_k: block (0,0,0) thread (256,0,0) writes "
                 "part[8], out of bounds of its 8 elements (64 bytes of static shared memory)"),
      std::string::npos)
      << write;
  // In bounds, the same launch shape passes.
  EXPECT_EQ(shared_error([&] {
              FL_LAUNCH(broken::writes_past_static_shared_k, 1, 8 * 32, 0)
              (&d);
            }),
            "");
  EXPECT_EQ(d, 1.0);
}

TEST(CudaEmulation, BarriersThatCannotOpenFailTheLaunchInsteadOfHanging) {
  int reached = 0;
  std::string what;
  try {
    FL_LAUNCH(broken::mixed_barriers_k, 1, 64, 0)(&reached);
  } catch (const emu::DeadlockError& e) {
    what = e.what();
  }
  EXPECT_EQ(what,
            "broken::mixed_barriers_k: block (0,0,0) never finishes: 1 thread(s) wait at "
            "__syncthreads, 31 at a warp barrier whose other lanes wait elsewhere, 32 returned");
  EXPECT_EQ(reached, 32);  // the second warp only
  std::vector<int> out(128, -1);
  FL_LAUNCH(broken::warp_then_block_k, 1, 64, 0)(out.data());
  for (int i = 32; i < 64; ++i) EXPECT_EQ(out[64 + i], 32 + (i + 1) % 32) << i;
  EXPECT_EQ(out[0], -1);
  EXPECT_EQ(out[64], -1);
}

// The CUDA path's linear and attention end to end: gemm_plan's layout, the reference GEMM, and the
// emulated softmax, bias and bias-gradient kernels.
struct EmulatedExec {
  cuda::plan::Operands format = cuda::plan::Operands::kF32;
  cuda::plan::Operands operands() const { return format; }
  void gemm(const cuda::plan::ColGemm& g, const char*) { test::reference_gemm(g); }
  test::ReferenceExec::Scratch16 scratch16(size_t n, const char*) {
    return {std::vector<uint16_t>(n, 0x7e00)};
  }
  void to16(const float* src, uint16_t* dst, size_t n, cuda::plan::Operands f) {
    launch::encode(src, dst, static_cast<int>(f), n);  // the conversion kernel, emulated
  }
  void split_heads(const float* src, int ld, int parts, void* dst, cuda::plan::Operands f, int b,
                   int t, int nh, int hs) {
    launch::split_heads(src, ld, parts, dst, static_cast<int>(f), b, t, nh, hs);
  }
  void merge_heads(float* dst, int ld, int parts, const float* src, bool accumulate, int b, int t,
                   int nh, int hs) {
    launch::merge_heads(dst, ld, parts, src, accumulate, b, t, nh, hs);
  }
  void causal_softmax_forward(float* att, int rows, int t) {
    launch::causal_softmax_forward(att, rows, t);
  }
  void causal_softmax_backward(float* d, const float* a, int rows, int t, float scale) {
    launch::causal_softmax_backward(d, a, rows, t, scale);
  }
  void add_bias(float* out, const float* bias, int n, int c) { launch::add_bias(out, bias, n, c); }
  void bias_backward(float* dbias, const float* dout, int n, int c) {
    std::vector<float> scratch(launch::column_scratch(n, c));
    launch::bias_backward(dbias, dout, n, c, scratch.data());
  }
  struct Scratch {
    std::vector<float> v;
    float* data() { return v.data(); }
  };
  Scratch scratch(size_t floats, const char*) { return Scratch{std::vector<float>(floats)}; }
};

TEST(CudaEmulation, LinearAndAttentionThroughTheCudaPath) {
  const int OC = 40;
  auto inp = randn(N * C, 23), w = randn(OC * C, 24), b = randn(OC, 25), dout = randn(N * OC, 26);
  std::vector<float> out(N * OC), dinp(N * C, 0.5f), dw(OC * C), db(OC, 1.0f);
  ops::linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  ops::linear_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                       OC);
  EmulatedExec x;
  std::vector<float> eout(N * OC), edinp(N * C, 0.5f), edw(OC * C), edb(OC, 1.0f);
  cuda::plan::linear_forward(x, eout.data(), inp.data(), w.data(), b.data(), N, C, OC);
  cuda::plan::linear_backward(x, edinp.data(), edw.data(), edb.data(), dout.data(), inp.data(),
                              w.data(), N, C, OC);
  expect_close(eout, out, 1e-5, "linear_forward", true);
  expect_close(edinp, dinp, 1e-5, "linear_backward dinp", true);
  expect_close(edw, dw, 1e-5, "linear_backward dweight", true);
  expect_close(edb, db, 1e-5, "linear_backward dbias", true);

  auto qkv = randn(N * 3 * C, 27), dy = randn(N * C, 28);
  std::vector<float> aout(N * C), att(B * NH * T * T), dqkv(N * 3 * C, 0.125f);
  ops::attention_forward(aout.data(), att.data(), qkv.data(), B, T, C, NH);
  ops::attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
  std::vector<float> eaout(N * C), eatt(B * NH * T * T), edqkv(N * 3 * C, 0.125f);
  cuda::plan::attention_forward(x, eaout.data(), eatt.data(), qkv.data(), B, T, C, NH);
  cuda::plan::attention_backward(x, edqkv.data(), dy.data(), qkv.data(), eatt.data(), B, T, C, NH);
  expect_close(eatt, att, 1e-5, "attention probabilities", true);
  expect_close(eaout, aout, 1e-5, "attention_forward", true);
  expect_close(edqkv, dqkv, 1e-5, "attention_backward", true);
}

// The 16-bit path: operands converted by the emulated conversion kernel, then the same GEMMs as the
// reference executor with bf16 operands (kernels/cuda/gemm_plan.hpp's layout is checked bitwise in
// gemm_plan_test); only the emulated softmax kernels' summation order differs. Small shapes: every
// emulated block is 256 OS threads.
TEST(CudaEmulation, LinearAndAttentionInBf16ThroughTheCudaPath) {
  constexpr int b = 1, t = 9, c = 16, nh = 2, n = b * t, oc = 8;
  auto inp = randn(n * c, 23), w = randn(oc * c, 24), bias = randn(oc, 25),
       dout = randn(n * oc, 26);
  auto qkv = randn(n * 3 * c, 27), dy = randn(n * c, 28);
  EmulatedExec x;
  x.format = cuda::plan::Operands::kBF16;
  test::ReferenceExec r;
  r.format = cuda::plan::Operands::kBF16;
  std::vector<float> out(n * oc), dinp(n * c, 0.5f), dw(oc * c), aout(n * c), att(b * nh * t * t),
      dqkv(n * 3 * c, 0.125f);
  auto eout = out, edinp = dinp, edw = dw, eaout = aout, eatt = att, edqkv = dqkv;
  cuda::plan::linear_forward(r, out.data(), inp.data(), w.data(), bias.data(), n, c, oc);
  cuda::plan::linear_backward(r, dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(),
                              n, c, oc);
  cuda::plan::attention_forward(r, aout.data(), att.data(), qkv.data(), b, t, c, nh);
  cuda::plan::attention_backward(r, dqkv.data(), dy.data(), qkv.data(), att.data(), b, t, c, nh);
  cuda::plan::linear_forward(x, eout.data(), inp.data(), w.data(), bias.data(), n, c, oc);
  cuda::plan::linear_backward(x, edinp.data(), edw.data(), nullptr, dout.data(), inp.data(),
                              w.data(), n, c, oc);
  cuda::plan::attention_forward(x, eaout.data(), eatt.data(), qkv.data(), b, t, c, nh);
  cuda::plan::attention_backward(x, edqkv.data(), dy.data(), qkv.data(), eatt.data(), b, t, c, nh);
  expect_close(eout, out, 0, "bf16 linear_forward");
  expect_close(edinp, dinp, 0, "bf16 linear_backward dinp");
  expect_close(edw, dw, 0, "bf16 linear_backward dweight");
  expect_close(eatt, att, 1e-5, "bf16 attention probabilities", true);
  // A probability one fp32 ulp apart can round to the neighbouring bf16 value (2^-8 relative):
  // Δout ≤ 2^-8·max|v| (docs/gpu.md), so 2·2^-8 of the largest magnitude.
  expect_close(eaout, aout, 2.0 / 256, "bf16 attention_forward", true);
  expect_close(edqkv, dqkv, 2.0 / 256, "bf16 attention_backward", true);
}

}  // namespace
}  // namespace fl
