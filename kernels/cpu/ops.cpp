// CPU kernels of the decoder. Each has a straightforward reference form; the tests compare every
// backward against central finite differences of its forward, and the CUDA kernels against these.
#include "kernels/cpu/adamw_impl.hpp"
#include "kernels/cpu/gelu_impl.hpp"
#include "kernels/cpu/ops_cpu.hpp"
#include "kernels/plugin.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace fl::ops::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* o = out + (static_cast<size_t>(b) * T + t) * C;
      const float* e = wte + static_cast<size_t>(tokens[b * T + t]) * C;
      const float* p = wpe + static_cast<size_t>(t) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
      if (dwte) {
        float* e = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
        for (int c = 0; c < C; ++c) e[c] += d[c];
      }
      if (dwpe) {
        float* p = dwpe + static_cast<size_t>(t) * C;
        for (int c = 0; c < C; ++c) p[c] += d[c];
      }
    }
  }
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  // The bias is laid down first and the GEMM accumulates onto it (beta = 1): one pass over the
  // output instead of a second read-modify-write after the GEMM.
  if (bias) {
    for (int n = 0; n < N; ++n) {
      std::memcpy(out + static_cast<size_t>(n) * OC, bias, static_cast<size_t>(OC) * sizeof(float));
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
              bias ? 1.0f : 0.0f, out, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  if (dinp) {  // [N, OC] · [OC, C]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                1.0f, dinp, C);
  }
  if (dweight) {  // [OC, N] · [N, C]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                dweight, C);
  }
  if (dbias) {
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * OC;
      for (int j = 0; j < OC; ++j) dbias[j] += d[j];
    }
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  const float eps = 1e-5f;
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= static_cast<float>(C);
    float var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<float>(C);
    float s = 1.0f / std::sqrt(var + eps);
    float* o = out + static_cast<size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* d = dout + static_cast<size_t>(n) * C;
    const float* x = inp + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    const float m = mean[n], s = rstd[n];
    float mean_dnorm = 0, mean_dnorm_norm = 0;
    for (int c = 0; c < C; ++c) {
      float norm = (x[c] - m) * s;
      float dnorm = weight[c] * d[c];
      mean_dnorm += dnorm;
      mean_dnorm_norm += dnorm * norm;
    }
    mean_dnorm /= static_cast<float>(C);
    mean_dnorm_norm /= static_cast<float>(C);
    for (int c = 0; c < C; ++c) {
      float norm = (x[c] - m) * s;
      float dnorm = weight[c] * d[c];
      dbias[c] += d[c];
      dweight[c] += norm * d[c];
      dx[c] += s * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
    }
  }
}

namespace {
constexpr float kGeluScale = impl::kGeluScale;
}

void gelu_forward(float* out, const float* inp, size_t n) {
  if (auto f = plugin_kernels().gelu_forward) return f(out, inp, n);
  impl::gelu_forward(out, inp, n);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + 0.044715f * x * x * x);
    float th = std::tanh(u);
    float sech2 = 1.0f - th * th;
    float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
  }
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld = 3 * C;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + static_cast<size_t>(b) * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      // scores = q · kᵀ · scale over all (t, s); the causal mask is applied by the softmax.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ld, k, ld, 0.0f, a,
                  T);
      for (int t = 0; t < T; ++t) {
        float* row = a + static_cast<size_t>(t) * T;
        float mx = row[0];
        for (int s = 1; s <= t; ++s) mx = std::max(mx, row[s]);
        float sum = 0;
        for (int s = 0; s <= t; ++s) {
          row[s] = std::exp(row[s] - mx);
          sum += row[s];
        }
        const float inv = 1.0f / sum;
        for (int s = 0; s <= t; ++s) row[s] *= inv;
        for (int s = t + 1; s < T; ++s) row[s] = 0.0f;
      }
      float* o = out + static_cast<size_t>(b) * T * C + h * hs;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, ld, 0.0f, o,
                  C);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld = 3 * C;
  std::vector<float> datt(static_cast<size_t>(T) * T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const size_t base = static_cast<size_t>(b) * T * ld + h * hs;
      const float* q = qkv + base;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + base;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      const float* d = dout + static_cast<size_t>(b) * T * C + h * hs;
      // datt = dout · vᵀ ; dv += attᵀ · dout
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, d, C, v, ld, 0.0f,
                  datt.data(), T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, d, C, 1.0f, dv,
                  ld);
      // Softmax backward, row by row: dscore = att · (datt - Σ att·datt).
      for (int t = 0; t < T; ++t) {
        const float* arow = a + static_cast<size_t>(t) * T;
        float* drow = datt.data() + static_cast<size_t>(t) * T;
        float dot = 0;
        for (int s = 0; s <= t; ++s) dot += arow[s] * drow[s];
        for (int s = 0; s <= t; ++s) drow[s] = arow[s] * (drow[s] - dot) * scale;
        for (int s = t + 1; s < T; ++s) drow[s] = 0.0f;
      }
      // dq += dscore · k ; dk += dscoreᵀ · q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, datt.data(), T, k, ld,
                  1.0f, dq, ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, datt.data(), T, q, ld,
                  1.0f, dk, ld);
    }
  }
}

void kv_decode_attention(float* out, float* kcache, float* vcache, const float* qkv, int B, int NH,
                         int T, int hs, int t, int window) {
  const int Cl = NH * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int s0 = window > 0 ? std::max(0, t - window + 1) : 0;
  std::vector<float> scores(static_cast<size_t>(t) + 1);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + static_cast<size_t>(b) * 3 * Cl + h * hs;
      const size_t base = (static_cast<size_t>(b) * NH + h) * T * hs;
      float* K = kcache + base;
      float* V = vcache + base;
      std::memcpy(K + static_cast<size_t>(t) * hs, q + Cl, hs * sizeof(float));
      std::memcpy(V + static_cast<size_t>(t) * hs, q + 2 * Cl, hs * sizeof(float));
      float mx = -INFINITY;
      for (int s = s0; s <= t; ++s) {
        float d = 0;
        for (int i = 0; i < hs; ++i) d += q[i] * K[static_cast<size_t>(s) * hs + i];
        scores[static_cast<size_t>(s)] = d * scale;
        mx = std::max(mx, scores[static_cast<size_t>(s)]);
      }
      float sum = 0;
      for (int s = s0; s <= t; ++s) {
        scores[static_cast<size_t>(s)] = std::exp(scores[static_cast<size_t>(s)] - mx);
        sum += scores[static_cast<size_t>(s)];
      }
      float* y = out + static_cast<size_t>(b) * Cl + h * hs;
      std::fill(y, y + hs, 0.0f);
      for (int s = s0; s <= t; ++s) {
        const float a = scores[static_cast<size_t>(s)] / sum;
        for (int i = 0; i < hs; ++i) y[i] += a * V[static_cast<size_t>(s) * hs + i];
      }
    }
  }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; ++n) {
    const float* l = logits + static_cast<size_t>(n) * V;
    float* p = probs + static_cast<size_t>(n) * V;
    float mx = l[0];
    for (int i = 1; i < V; ++i) mx = std::max(mx, l[i]);
    double sum = 0;
    for (int i = 0; i < V; ++i) {
      p[i] = std::exp(l[i] - mx);
      sum += p[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int i = 0; i < V; ++i) p[i] *= inv;
    const int32_t tgt = targets[n];
    losses[n] = tgt < 0 ? 0.0f : -std::log(std::max(p[tgt], 1e-30f));
  }
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V) {
  for (int n = 0; n < N; ++n) {
    const int32_t tgt = targets[n];
    if (tgt < 0) continue;
    const float* p = probs + static_cast<size_t>(n) * V;
    float* d = dlogits + static_cast<size_t>(n) * V;
    for (int i = 0; i < V; ++i) d[i] += (p[i] - (i == tgt ? 1.0f : 0.0f)) * dloss;
  }
}

double sum_of_squares(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

double masked_sum_of_squares(const float* x, const uint8_t* skip, size_t n, double divisor) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    if (skip && skip[i]) continue;
    const double v = static_cast<double>(x[i]) / divisor;
    s += v * v;
  }
  return s;
}

void add_bias(float* out, const float* bias, int N, int C) {
  for (int i = 0; i < N; ++i) {
    for (int c = 0; c < C; ++c) out[static_cast<size_t>(i) * C + c] += bias[c];
  }
}

void bias_backward(float* dbias, const float* dout, int N, int C) {
  for (int i = 0; i < N; ++i) {
    for (int c = 0; c < C; ++c) dbias[c] += dout[static_cast<size_t>(i) * C + c];
  }
}

double loss_sum(const float* losses, const int32_t* targets, int N, int* valid) {
  double sum = 0;
  int count = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) {
      sum += losses[i];
      ++count;
    }
  }
  *valid = count;
  return sum;
}

void copy(float* dst, const float* src, size_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void zero(void* dst, size_t bytes) {
  std::memset(dst, 0, bytes);
}

void round_to_precision(float* x, size_t n, DType t) {
  if (t == DType::kF16) {
    for (size_t i = 0; i < n; ++i) x[i] = half_to_float(float_to_half(x[i]));
  } else if (t == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
  }
}

void encode(const float* src, void* dst, DType t, size_t n) {
  convert_from_f32(src, dst, t, n);
}

void decode(const void* src, DType t, float* dst, size_t n) {
  convert_to_f32(src, t, dst, n);
}

void to_host(void* host, const void* src, size_t bytes) {
  std::memcpy(host, src, bytes);
}

void from_host(void* dst, const void* host, size_t bytes) {
  std::memcpy(dst, host, bytes);
}

void synchronize() {}

void scale(float* x, size_t n, float by) {
  for (size_t i = 0; i < n; ++i) x[i] *= by;
}

bool has_non_finite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return true;
  }
  return false;
}

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                  const AdamW& hp) {
  const PluginRegistry& k = plugin_kernels();
  if (k.adamw && k.adamw_multiple > 1 && n % k.adamw_multiple != 0) {
    raise(
        "kernel 'adamw' of plugin '{}' cannot run on {} elements: it handles multiples of {} "
        "only ({} left over)",
        k.adamw_plugin, n, k.adamw_multiple, n % k.adamw_multiple);
  }
  if (k.adamw) before_plugin_kernel(k.adamw_plugin);
  const AdamWFn fn = k.adamw ? k.adamw : &impl::adamw;
  fn(param, grad, m, v, n, t, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay);
}

void sgd_update(float* param, const float* grad, float* momentum_buf, size_t n, const Sgd& hp) {
  const bool with_momentum = hp.momentum > 0.0f;
  for (size_t i = 0; i < n; ++i) {
    float d = grad[i] + hp.weight_decay * param[i];
    if (with_momentum) {
      d = hp.momentum * momentum_buf[i] + d;
      momentum_buf[i] = d;
    }
    param[i] -= hp.lr * d;
  }
}

}  // namespace fl::ops::cpu
