// Launchers of the CUDA kernels in kernels.cu (compiled by nvcc as C++17, so this header stays
// free of the project's C++20 headers). Every launcher queues on the legacy default stream, the
// compute stream of a rank, and reports launch errors through check_launch().
#pragma once

#include <cstddef>
#include <cstdint>

namespace fl::cuda {

// Raises fl::CudaError naming the kernel when the launch failed (defined in runtime.cpp).
void check_launch(const char* kernel);

namespace launch {

// 16-bit storage formats, as fl::DType numbers them.
constexpr int kF16 = 1;
constexpr int kBF16 = 2;

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C);
// Column reductions over N rows (bias and layer-norm parameter gradients) run in two passes:
// partial sums over chunks of kRowChunk rows (one thread per column and chunk), then one thread per
// column adds its chunks in order — parallel over rows yet deterministic. `scratch` holds
// column_scratch(N, C) floats per reduced quantity.
constexpr int kRowChunk = 32;
inline size_t column_scratch(int N, int C) {
  return static_cast<size_t>((N + kRowChunk - 1) / kRowChunk) * static_cast<size_t>(C);
}
void add_bias(float* out, const float* bias, int N, int C);
void bias_backward(float* dbias, const float* dout, int N, int C, float* scratch);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
// `scratch`: 2 × column_scratch(N, C) floats.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, float* scratch);
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
// Rows of T scores each (row r is query position r % T): causal softmax in place.
void causal_softmax_forward(float* att, int rows, int T);
// datt = att · (datt - Σ att·datt) · scale over the causal part, 0 above it.
void causal_softmax_backward(float* datt, const float* att, int rows, int T, float scale);
// Attention's head layout. src holds rows of `ld` floats ([B, T, ld]); part p (of `parts`) of a
// row is its columns p·NH·hs .. (p+1)·NH·hs, head h of the part the hs columns at h·hs. split_heads
// gathers them into dst [parts, B, NH, T, hs] in `dtype` (0 fp32, kF16, kBF16: the 16-bit GEMM
// operand's conversion happens in the same pass), so that one strided batch of B·NH matrices
// covers every sequence and head. merge_heads scatters back: dst's element = src's (+ dst's when
// accumulate).
void split_heads(const float* src, int ld, int parts, void* dst, int dtype, int B, int T, int NH,
                 int hs);
void merge_heads(float* dst, int ld, int parts, const float* src, bool accumulate, int B, int T,
                 int NH, int hs);
void kv_decode_attention(float* out, float* kcache, float* vcache, const float* qkv, int B, int NH,
                         int T, int hs, int t, int window);
void residual_forward(float* out, const float* a, const float* b, size_t n);
void residual_backward(float* da, float* db, const float* dout, size_t n);
void softmax_xent_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V);
void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                           int N, int V);
// Device outputs: *sum and *count are overwritten.
void loss_sum(const float* losses, const int32_t* targets, int N, double* sum, int* count);
// *out (device, zeroed by the caller) += Σ (x/divisor)² over elements whose skip byte is 0.
void sum_of_squares(const float* x, const uint8_t* skip, size_t n, double divisor, double* out);
void scale(float* x, size_t n, float by);
// *flag (device, zeroed by the caller) becomes 1 if any element is inf or nan.
void has_non_finite(const float* x, size_t n, int* flag);
void round_to(float* x, size_t n, int dtype);
void encode(const float* src, void* dst, int dtype, size_t n);
void decode(const void* src, int dtype, float* dst, size_t n);
void adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float c1, float c2);
void sgd(float* param, const float* grad, float* buf, size_t n, float lr, float momentum,
         float weight_decay);

}  // namespace launch
}  // namespace fl::cuda
