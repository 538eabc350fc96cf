// CPU kernels of the GPT-style decoder, forward and backward, fp32 math. Layouts follow the
// usual decoder conventions: activations are [B, T, C] row-major; a linear layer's weight is
// [OC, C] and computes out = inp · Wᵀ + b. Backward kernels accumulate (+=) into gradients, so
// gradient accumulation over micro-batches is free. GEMMs go through OpenBLAS.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fl::ops {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C);

// out = inp · Wᵀ + bias; inp [N, C], weight [OC, C], bias [OC] or null, out [N, OC].
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);
// dinp += dout · W; dweight += doutᵀ · inp; dbias += Σ dout. Any of the outputs may be null.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);

// Row-wise layer norm over C with eps 1e-5; mean/rstd [N] are kept for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);

// GELU, tanh approximation.
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// Causal multi-head self-attention. qkv [B, T, 3C] holds q, k, v (each C = NH · hs); out [B, T, C].
// att [B, NH, T, T] keeps the softmax probabilities for backward.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH);

// out = a + b (elementwise); backward adds dout to both.
void residual_forward(float* out, const float* a, const float* b, size_t n);
void residual_backward(float* da, float* db, const float* dout, size_t n);

// Softmax over V of logits [N, V] into probs; losses[n] = -log probs[n, targets[n]].
// Targets < 0 are ignored (loss 0, no gradient).
void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V);
// dlogits += (probs - onehot(target)) · dloss
void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V);

// Σ x² of a buffer (for global norms, in double to keep large sums exact enough).
double sum_of_squares(const float* x, size_t n);
void scale(float* x, size_t n, float by);
// True if any element is inf or nan.
bool has_non_finite(const float* x, size_t n);

struct AdamW {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};
// One AdamW step at 1-based step `t`; m and v are the moment buffers.
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                  const AdamW& hp);

}  // namespace fl::ops
