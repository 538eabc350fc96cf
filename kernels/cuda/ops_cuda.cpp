// fl::ops on a GPU: GEMMs through cuBLAS as gemm_plan.hpp lays them out, everything else through
// the kernels of kernels.cu. Reductions that the trainer needs on the host (a loss, a norm, an
// overflow flag) copy back one scalar.
#include "kernels/cuda/ops_cuda.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "kernels/cuda/gemm_plan.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/runtime.hpp"

namespace fl::ops::cuda {

using fl::cuda::blas_api;
using fl::cuda::check;
using fl::cuda::check_blas;
namespace launch = fl::cuda::launch;
namespace plan = fl::cuda::plan;

namespace {

// The GEMM precision (a DType) converts to the plan's operand format by number.
static_assert(static_cast<int>(plan::Operands::kF16) == static_cast<int>(DType::kF16) &&
              static_cast<int>(plan::Operands::kBF16) == static_cast<int>(DType::kBF16) &&
              static_cast<int>(plan::Operands::kF32) == static_cast<int>(DType::kF32) &&
              static_cast<int>(plan::Operands::kBF16) == launch::kBF16 &&
              static_cast<int>(plan::Operands::kF16) == launch::kF16);

// The executor of gemm_plan.hpp on a GPU: cuBLAS and the kernels of kernels.cu. The operand format
// is the thread's GEMM precision: fp32 SGEMMs, or 16-bit operands (converted by launch::encode into
// scratch from the caching allocator, charged to the device's accountant) with fp32 accumulation.
struct CudaExec {
  plan::Operands format = static_cast<plan::Operands>(ops::gemm_precision());

  plan::Operands operands() const { return format; }
  void gemm(const plan::ColGemm& g, const char* what) {
    // The op's name in the error: "linear_forward (sgemm)", "attention scores (gemmex bf16)".
    auto check = [&](cublasStatus_t s) {
      if (s != CUBLAS_STATUS_SUCCESS) {
        check_blas(s, fmt::format("{} ({})", what, plan::operands_name(g.operands)));
      }
    };
    const cublasOperation_t ta = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (g.operands == plan::Operands::kF32) {
      const auto* A = static_cast<const float*>(g.A);
      const auto* B = static_cast<const float*>(g.B);
      if (g.batch == 1) {
        check(blas_api().sgemm(fl::cuda::blas(), ta, tb, g.m, g.n, g.k, &g.alpha, A, g.lda, B,
                               g.ldb, &g.beta, g.C, g.ldc));
      } else {
        check(blas_api().sgemm_strided_batched(fl::cuda::blas(), ta, tb, g.m, g.n, g.k, &g.alpha, A,
                                               g.lda, g.sa, B, g.ldb, g.sb, &g.beta, g.C, g.ldc,
                                               g.sc, g.batch));
      }
      return;
    }
    // 16-bit A and B, fp32 C, fp32 accumulation (CUBLAS_COMPUTE_32F: tensor cores, no 16-bit
    // reductions).
    const cudaDataType_t t = g.operands == plan::Operands::kF16 ? CUDA_R_16F : CUDA_R_16BF;
    if (g.batch == 1) {
      check(blas_api().gemm_ex(fl::cuda::blas(), ta, tb, g.m, g.n, g.k, &g.alpha, g.A, t, g.lda,
                               g.B, t, g.ldb, &g.beta, g.C, CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
    } else {
      check(blas_api().gemm_strided_batched_ex(fl::cuda::blas(), ta, tb, g.m, g.n, g.k, &g.alpha,
                                               g.A, t, g.lda, g.sa, g.B, t, g.ldb, g.sb, &g.beta,
                                               g.C, CUDA_R_32F, g.ldc, g.sc, g.batch,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
  struct Scratch16 {
    std::unique_ptr<fl::cuda::Scratch> s;
    uint16_t* data() { return s->as<uint16_t>(); }
  };
  Scratch16 scratch16(size_t n, const char* what) {
    return {std::make_unique<fl::cuda::Scratch>(n * sizeof(uint16_t), what)};
  }
  void to16(const float* src, uint16_t* dst, size_t n, plan::Operands f) {
    if (n > 0) launch::encode(src, dst, static_cast<int>(f), n);
  }
  void split_heads(const float* src, int ld, int parts, void* dst, plan::Operands f, int B, int T,
                   int NH, int hs) {
    launch::split_heads(src, ld, parts, dst, static_cast<int>(f), B, T, NH, hs);
  }
  void merge_heads(float* dst, int ld, int parts, const float* src, bool accumulate, int B, int T,
                   int NH, int hs) {
    launch::merge_heads(dst, ld, parts, src, accumulate, B, T, NH, hs);
  }
  void causal_softmax_forward(float* att, int rows, int T) {
    launch::causal_softmax_forward(att, rows, T);
  }
  void causal_softmax_backward(float* d, const float* a, int rows, int T, float scale) {
    launch::causal_softmax_backward(d, a, rows, T, scale);
  }
  void add_bias(float* out, const float* bias, int N, int C) { launch::add_bias(out, bias, N, C); }
  void bias_backward(float* dbias, const float* dout, int N, int C) {
    ops::cuda::bias_backward(dbias, dout, N, C);
  }
  struct Scratch {
    std::unique_ptr<fl::cuda::Scratch> s;
    float* data() { return s->as<float>(); }
  };
  Scratch scratch(size_t floats, const char* what) {
    return {std::make_unique<fl::cuda::Scratch>(floats * sizeof(float), what)};
  }
};

// A few bytes of device memory for reduction results, one block per device and thread.
template <class T>
T* result_slot() {
  thread_local std::map<int, void*> slots;
  void*& p = slots[fl::cuda::current_index()];
  if (p == nullptr) check(cudaMalloc(&p, 64), "cudaMalloc(result slot)");
  return static_cast<T*>(p);
}

template <class T>
T read_back(const T* dev, const char* what) {
  T v{};
  check(cudaMemcpy(&v, dev, sizeof(T), cudaMemcpyDeviceToHost), what);
  return v;
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  launch::embedding_forward(out, tokens, wte, wpe, B, T, C);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) {
  launch::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  CudaExec x;
  plan::linear_forward(x, out, inp, weight, bias, N, C, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  CudaExec x;
  plan::linear_backward(x, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  launch::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  fl::cuda::Scratch partials(2 * launch::column_scratch(N, C) * sizeof(float),
                             "scratch.layernorm.partials");
  launch::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                             partials.as<float>());
}

void gelu_forward(float* out, const float* inp, size_t n) {
  launch::gelu_forward(out, inp, n);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  launch::gelu_backward(dinp, inp, dout, n);
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  CudaExec x;
  plan::attention_forward(x, out, att, qkv, B, T, C, NH);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH) {
  CudaExec x;
  plan::attention_backward(x, dqkv, dout, qkv, att, B, T, C, NH);
}

void kv_decode_attention(float* out, float* kcache, float* vcache, const float* qkv, int B, int NH,
                         int T, int hs, int t, int window) {
  launch::kv_decode_attention(out, kcache, vcache, qkv, B, NH, T, hs, t, window);
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  launch::residual_forward(out, a, b, n);
}

void residual_backward(float* da, float* db, const float* dout, size_t n) {
  launch::residual_backward(da, db, dout, n);
}

void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V) {
  launch::softmax_xent_forward(losses, probs, logits, targets, N, V);
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V) {
  launch::softmax_xent_backward(dlogits, probs, targets, dloss, N, V);
}

void add_bias(float* out, const float* bias, int N, int C) {
  launch::add_bias(out, bias, N, C);
}

void bias_backward(float* dbias, const float* dout, int N, int C) {
  fl::cuda::Scratch partials(launch::column_scratch(N, C) * sizeof(float), "scratch.bias.partials");
  launch::bias_backward(dbias, dout, N, C, partials.as<float>());
}

double loss_sum(const float* losses, const int32_t* targets, int N, int* valid) {
  auto* slot = result_slot<double>();
  launch::loss_sum(losses, targets, N, slot, reinterpret_cast<int*>(slot + 1));
  const double sum = read_back(slot, "loss_sum (read back)");
  *valid = read_back(reinterpret_cast<const int*>(slot + 1), "loss_sum (read back)");
  return sum;
}

double masked_sum_of_squares(const float* x, const uint8_t* skip, size_t n, double divisor) {
  auto* slot = result_slot<double>();
  check(cudaMemsetAsync(slot, 0, sizeof(double)), "sum_of_squares (clear)");
  if (n > 0) launch::sum_of_squares(x, skip, n, divisor, slot);
  return read_back(slot, "sum_of_squares (read back)");
}

double sum_of_squares(const float* x, size_t n) {
  return masked_sum_of_squares(x, nullptr, n, 1.0);
}

void scale(float* x, size_t n, float by) {
  if (n > 0) launch::scale(x, n, by);
}

bool has_non_finite(const float* x, size_t n) {
  auto* flag = result_slot<int>();
  check(cudaMemsetAsync(flag, 0, sizeof(int)), "has_non_finite (clear)");
  if (n > 0) launch::has_non_finite(x, n, flag);
  return read_back(flag, "has_non_finite (read back)") != 0;
}

void copy(float* dst, const float* src, size_t n) {
  copy_bytes(dst, src, n * sizeof(float));
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice), "device copy");
}

void zero(void* dst, size_t bytes) {
  if (bytes > 0) check(cudaMemsetAsync(dst, 0, bytes), "cudaMemsetAsync");
}

void round_to_precision(float* x, size_t n, DType t) {
  if ((t == DType::kF16 || t == DType::kBF16) && n > 0) {
    launch::round_to(x, n, static_cast<int>(t));
  }
}

void encode(const float* src, void* dst, DType t, size_t n) {
  if (t != DType::kF16 && t != DType::kBF16) {
    raise("encode: {} is not a 16-bit floating-point storage format", dtype_name(t));
  }
  if (n > 0) launch::encode(src, dst, static_cast<int>(t), n);
}

void decode(const void* src, DType t, float* dst, size_t n) {
  if (t != DType::kF16 && t != DType::kBF16) {
    raise("decode: {} is not a 16-bit floating-point storage format", dtype_name(t));
  }
  if (n > 0) launch::decode(src, static_cast<int>(t), dst, n);
}

void to_host(void* host, const void* src, size_t bytes) {
  if (bytes > 0) check(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "copy device->host");
}

void from_host(void* dst, const void* host, size_t bytes) {
  if (bytes > 0) check(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice), "copy host->device");
}

void synchronize() {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                  const AdamW& hp) {
  // The bias corrections exactly as the CPU kernel computes them (fp32 pow on the host).
  const float c1 = 1.0f - std::pow(hp.beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(hp.beta2, static_cast<float>(t));
  if (n > 0) {
    launch::adamw(param, grad, m, v, n, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, c1, c2);
  }
}

void sgd_update(float* param, const float* grad, float* momentum_buf, size_t n, const Sgd& hp) {
  if (n > 0) launch::sgd(param, grad, momentum_buf, n, hp.lr, hp.momentum, hp.weight_decay);
}

}  // namespace fl::ops::cuda
