#include "workloads/train/muon.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "kernels/device.hpp"
#include "kernels/ops.hpp"

namespace fl::train {

namespace {

bool named_for_adamw(const std::string& name) {
  return name.find("embed") != std::string::npos || name.find("lm_head") != std::string::npos;
}

// [cols, rows] from [rows, cols].
void transpose(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
}

}  // namespace

std::vector<MuonMatrix> muon_matrices(const model::ParamLayout& layout) {
  std::vector<MuonMatrix> out;
  for (const auto& s : layout.specs()) {
    if (s.rows < 2 || s.cols < 2 || s.shared || named_for_adamw(s.name)) continue;
    if (s.local_rows != s.rows || s.local_cols != s.cols) {
      raise<ConfigError>(
          "workload.optimizer muon: '{}' is a tensor-parallel shard [{}, {}] of [{}, {}], and the "
          "Newton-Schulz iteration of a shard is not that of the matrix (allowed: tp 1)",
          s.name, s.local_rows, s.local_cols, s.rows, s.cols);
    }
    out.push_back({s.offset, s.rows, s.cols});
  }
  return out;
}

void newton_schulz5(float* x, int64_t rows, int64_t cols) {
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, k = tall ? rows : cols;  // X is [r, k], r <= k
  const size_t n = static_cast<size_t>(r * k);
  std::vector<float> X(n), Xt(n), A(static_cast<size_t>(r * r)), A2(A.size()), BX(n);
  if (tall) {
    transpose(x, X.data(), rows, cols);
  } else {
    std::copy(x, x + n, X.begin());
  }
  double sq = 0;
  for (float v : X) sq += static_cast<double>(v) * v;
  const float inv = 1.0f / (static_cast<float>(std::sqrt(sq)) + 1e-7f);
  for (float& v : X) v *= inv;
  DeviceGuard on_host(Device::cpu());  // host buffers: the CPU kernels' GEMMs
  for (int step = 0; step < 5; ++step) {
    const int ri = static_cast<int>(r), ki = static_cast<int>(k);
    ops::linear_forward(A.data(), X.data(), X.data(), nullptr, ri, ki, ri);   // A = X Xᵀ
    ops::linear_forward(A2.data(), A.data(), A.data(), nullptr, ri, ri, ri);  // A² (A = Aᵀ)
    for (size_t i = 0; i < A.size(); ++i) A[i] = b * A[i] + c * A2[i];        // B = bA + cA²
    transpose(X.data(), Xt.data(), r, k);
    ops::linear_forward(BX.data(), A.data(), Xt.data(), nullptr, ri, ri, ki);  // B X
    for (size_t i = 0; i < n; ++i) X[i] = a * X[i] + BX[i];
  }
  if (tall) {
    transpose(X.data(), x, r, k);
  } else {
    std::copy(X.begin(), X.end(), x);
  }
}

Muon::Muon(const model::ParamLayout& layout, float momentum, MemoryAccountant& momentum_acct)
    : matrices_(muon_matrices(layout)), beta_(momentum) {
  size_t total = 0;
  for (const auto& m : matrices_) total += m.numel();
  momentum_ = Tensor::zeros({static_cast<int64_t>(std::max<size_t>(total, 1))}, DType::kF32,
                            "optimizer.muon_momentum", momentum_acct);
}

void Muon::orthogonalise(float* grads, size_t first, size_t n) {
  ops::HostStage g(grads, n);
  ops::HostStage mom(momentum_.data<float>(), static_cast<size_t>(momentum_.numel()));
  size_t at = 0;
  for (const auto& mat : matrices_) {
    if (mat.offset < first || mat.offset + mat.numel() > first + n) {
      raise("Muon: matrix at flat offset {} ({} elements) is outside the gradients [{}, {})",
            mat.offset, mat.numel(), first, first + n);
    }
    float* u = g.host() + (mat.offset - first);
    float* m = mom.host() + at;
    // muon_update: momentum.lerp_(grad, 1 - beta); update = grad.lerp_(momentum, beta).
    for (size_t i = 0; i < mat.numel(); ++i) {
      m[i] += (1.0f - beta_) * (u[i] - m[i]);
      u[i] += beta_ * (m[i] - u[i]);
    }
    newton_schulz5(u, mat.rows, mat.cols);
    const float s = std::sqrt(std::max(1.0f, static_cast<float>(mat.rows) / mat.cols));
    for (size_t i = 0; i < mat.numel(); ++i) u[i] *= s;
    at += mat.numel();
  }
}

std::vector<std::pair<size_t, size_t>> Muon::runs(size_t first, size_t n) const {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& m : matrices_) {
    const size_t lo = std::max(m.offset, first), hi = std::min(m.offset + m.numel(), first + n);
    if (lo < hi) out.emplace_back(lo - first, hi - first);
  }
  return out;
}

void Muon::step(const parallel::ZeroEngine::Update& u, size_t a, size_t b, float lr,
                float weight_decay, const std::function<void(size_t, size_t)>& adamw) const {
  size_t at = a;
  for (const auto& [lo, hi] : runs(u.first + a, b - a)) {
    if (at < a + lo) adamw(at, a + lo);
    float* p = u.params + a + lo;
    const size_t n = hi - lo;
    if (weight_decay > 0) ops::scale(p, n, 1.0f - lr * weight_decay);
    ops::sgd_update(p, u.grads + a + lo, nullptr, n, ops::Sgd{lr, 0.0f, 0.0f});
    at = a + hi;
  }
  if (at < b) adamw(at, b);
}

}  // namespace fl::train
