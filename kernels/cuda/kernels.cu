// CUDA kernels of the decoder: the same math as kernels/cpu/ops.cpp (fp32, the same formulas and
// layouts), written for the GPU. Row-wise ops use one warp per row; column reductions (bias and
// layer-norm parameter gradients) use one thread per column walking the rows, which keeps them
// deterministic; element-wise ops use grid-stride loops. The GEMMs live in ops_cuda.cpp (cuBLAS),
// the optimizer's and reduced precision's kernels in numerics.cu.
#include "kernels/cuda/kernel_common.cuh"

namespace fl::cuda::launch {

namespace {

__global__ void embedding_forward_k(float* out, const int32_t* tokens, const float* wte,
                                    const float* wpe, int T, int C, size_t n) {
  FL_GRID_STRIDE(i, n) {
    const size_t bt = i / C;
    const int c = static_cast<int>(i % C), t = static_cast<int>(bt % T);
    out[i] = wte[static_cast<size_t>(tokens[bt]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
  }
}

__global__ void embedding_backward_wte_k(float* dwte, const float* dout, const int32_t* tokens,
                                         int C, size_t n) {
  FL_GRID_STRIDE(i, n) {
    const size_t bt = i / C;
    atomicAdd(&dwte[static_cast<size_t>(tokens[bt]) * C + i % C], dout[i]);
  }
}

// dwpe[t, c] += Σ_b dout[b, t, c], one thread per (t, c): no atomics, fixed order.
__global__ void embedding_backward_wpe_k(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t n = static_cast<size_t>(T) * C;
  FL_GRID_STRIDE(i, n) {
    float s = 0;
    for (int b = 0; b < B; ++b) s += dout[static_cast<size_t>(b) * n + i];
    dwpe[i] += s;
  }
}

__global__ void add_bias_k(float* out, const float* bias, int C, size_t n) {
  FL_GRID_STRIDE(i, n) out[i] += bias[i % C];
}

// partial[chunk, c] = Σ over the chunk's rows of x[r, c] (grid: column blocks × chunks).
__global__ void column_partials_k(float* partial, const float* x, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * kRowChunk, r1 = min(N, r0 + kRowChunk);
  float s = 0;
  for (int r = r0; r < r1; ++r) s += x[static_cast<size_t>(r) * C + c];
  partial[static_cast<size_t>(blockIdx.y) * C + c] = s;
}

// out[c] += Σ_chunk partial[chunk, c], chunks in order.
__global__ void column_finish_k(float* out, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int k = 0; k < chunks; ++k) s += partial[static_cast<size_t>(k) * C + c];
  out[c] += s;
}

__global__ void layernorm_forward_k(float* out, float* mean, float* rstd, const float* inp,
                                    const float* weight, const float* bias, int N, int C) {
  const int r = warp_row(N);
  if (r < 0) return;
  const int lane = threadIdx.x % 32;
  const float* x = inp + static_cast<size_t>(r) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float var = warp_sum(v) / static_cast<float>(C);
  const float rs = 1.0f / sqrtf(var + 1e-5f);
  float* o = out + static_cast<size_t>(r) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * rs * weight[c] + bias[c];
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

__global__ void layernorm_backward_input_k(float* dinp, const float* dout, const float* inp,
                                           const float* weight, const float* mean,
                                           const float* rstd, int N, int C) {
  const int r = warp_row(N);
  if (r < 0) return;
  const int lane = threadIdx.x % 32;
  const size_t base = static_cast<size_t>(r) * C;
  const float m = mean[r], s = rstd[r];
  float a = 0, b = 0;
  for (int c = lane; c < C; c += 32) {
    const float norm = (inp[base + c] - m) * s;
    const float dnorm = weight[c] * dout[base + c];
    a += dnorm;
    b += dnorm * norm;
  }
  const float mean_dnorm = warp_sum(a) / static_cast<float>(C);
  const float mean_dnorm_norm = warp_sum(b) / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    const float norm = (inp[base + c] - m) * s;
    const float dnorm = weight[c] * dout[base + c];
    dinp[base + c] += s * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
  }
}

// Chunk partials of dweight (Σ norm·dout) and dbias (Σ dout), as column_partials_k.
__global__ void layernorm_params_partials_k(float* pw, float* pb, const float* dout,
                                            const float* inp, const float* mean, const float* rstd,
                                            int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * kRowChunk, r1 = min(N, r0 + kRowChunk);
  float dw = 0, db = 0;
  for (int r = r0; r < r1; ++r) {
    const size_t i = static_cast<size_t>(r) * C + c;
    db += dout[i];
    dw += (inp[i] - mean[r]) * rstd[r] * dout[i];
  }
  pw[static_cast<size_t>(blockIdx.y) * C + c] = dw;
  pb[static_cast<size_t>(blockIdx.y) * C + c] = db;
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void gelu_forward_k(float* out, const float* inp, size_t n) {
  FL_GRID_STRIDE(i, n) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

__global__ void gelu_backward_k(float* dinp, const float* inp, const float* dout, size_t n) {
  FL_GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
  }
}

__global__ void causal_softmax_forward_k(float* att, int rows, int T) {
  const int r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % 32, t = r % T;
  float* row = att + static_cast<size_t>(r) * T;
  float mx = -INFINITY;
  for (int s = lane; s <= t; s += 32) mx = fmaxf(mx, row[s]);
  mx = warp_max(mx);
  float sum = 0;
  for (int s = lane; s <= t; s += 32) {
    const float e = expf(row[s] - mx);
    row[s] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int s = lane; s < T; s += 32) row[s] = s <= t ? row[s] * inv : 0.0f;
}

__global__ void causal_softmax_backward_k(float* datt, const float* att, int rows, int T,
                                          float scale) {
  const int r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % 32, t = r % T;
  const float* a = att + static_cast<size_t>(r) * T;
  float* d = datt + static_cast<size_t>(r) * T;
  float dot = 0;
  for (int s = lane; s <= t; s += 32) dot += a[s] * d[s];
  dot = warp_sum(dot);
  for (int s = lane; s < T; s += 32) d[s] = s <= t ? a[s] * (d[s] - dot) * scale : 0.0f;
}

// Element i of the head layout [parts, B, NH, T, hs] and its place in rows of ld floats.
__device__ __forceinline__ size_t head_source(size_t i, int ld, int B, int T, int NH, int hs) {
  const int j = static_cast<int>(i % hs);
  size_t r = i / hs;
  const int t = static_cast<int>(r % T);
  r /= T;
  const int h = static_cast<int>(r % NH);
  r /= NH;
  const int b = static_cast<int>(r % B);
  const int p = static_cast<int>(r / B);
  return (static_cast<size_t>(b) * T + t) * ld + (static_cast<size_t>(p) * NH + h) * hs + j;
}

__global__ void split_heads_k(const float* src, int ld, void* dst, int dtype, int B, int T, int NH,
                              int hs, size_t n) {
  FL_GRID_STRIDE(i, n) {
    const float x = src[head_source(i, ld, B, T, NH, hs)];
    if (dtype == kF16) {
      static_cast<__half*>(dst)[i] = __float2half_rn(x);
    } else if (dtype == kBF16) {
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(x);
    } else {
      static_cast<float*>(dst)[i] = x;
    }
  }
}

__global__ void merge_heads_k(float* dst, int ld, const float* src, bool accumulate, int B, int T,
                              int NH, int hs, size_t n) {
  FL_GRID_STRIDE(i, n) {
    float& y = dst[head_source(i, ld, B, T, NH, hs)];
    y = accumulate ? y + src[i] : src[i];
  }
}

// One block per (sequence, head): the block's threads copy k and v into the caches, score the
// positions s0..t (one warp per position, lanes over the head dimension), take the softmax over
// them in shared memory and accumulate the weighted values (threads over the head dimension).
__global__ void kv_decode_attention_k(float* out, float* kcache, float* vcache, const float* qkv,
                                      int NH, int T, int hs, int t, int s0) {
  FL_DYNAMIC_SHARED(float, scores);  // t + 1 floats
  const int b = blockIdx.x / NH, h = blockIdx.x % NH, Cl = NH * hs;
  const float* q = qkv + static_cast<size_t>(b) * 3 * Cl + h * hs;
  const size_t base = (static_cast<size_t>(b) * NH + h) * T * hs;
  float* K = kcache + base;
  float* V = vcache + base;
  for (int i = threadIdx.x; i < hs; i += blockDim.x) {
    K[static_cast<size_t>(t) * hs + i] = q[Cl + i];
    V[static_cast<size_t>(t) * hs + i] = q[2 * Cl + i];
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  for (int s = s0 + warp; s <= t; s += warps) {
    float d = 0;
    for (int i = lane; i < hs; i += 32) d += q[i] * K[static_cast<size_t>(s) * hs + i];
    d = warp_sum(d);
    if (lane == 0) scores[s] = d * scale;
  }
  __syncthreads();
  if (warp == 0) {
    float mx = -INFINITY;
    for (int s = s0 + lane; s <= t; s += 32) mx = fmaxf(mx, scores[s]);
    mx = warp_max(mx);
    float sum = 0;
    for (int s = s0 + lane; s <= t; s += 32) {
      scores[s] = expf(scores[s] - mx);
      sum += scores[s];
    }
    sum = warp_sum(sum);
    for (int s = s0 + lane; s <= t; s += 32) scores[s] /= sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < hs; i += blockDim.x) {
    float y = 0;
    for (int s = s0; s <= t; ++s) y += scores[s] * V[static_cast<size_t>(s) * hs + i];
    out[static_cast<size_t>(b) * Cl + h * hs + i] = y;
  }
}

__global__ void residual_forward_k(float* out, const float* a, const float* b, size_t n) {
  FL_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void residual_backward_k(float* da, float* db, const float* dout, size_t n) {
  FL_GRID_STRIDE(i, n) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

__global__ void softmax_xent_forward_k(float* losses, float* probs, const float* logits,
                                       const int32_t* targets, int N, int V) {
  const int r = warp_row(N);
  if (r < 0) return;
  const int lane = threadIdx.x % 32;
  const float* l = logits + static_cast<size_t>(r) * V;
  float* p = probs + static_cast<size_t>(r) * V;
  float mx = -INFINITY;
  for (int i = lane; i < V; i += 32) mx = fmaxf(mx, l[i]);
  mx = warp_max(mx);
  double sum = 0;  // in double, as the CPU kernel sums
  for (int i = lane; i < V; i += 32) {
    const float e = expf(l[i] - mx);
    p[i] = e;
    sum += e;
  }
  const float inv = static_cast<float>(1.0 / warp_sum(sum));
  for (int i = lane; i < V; i += 32) p[i] *= inv;
  __syncwarp();
  if (lane == 0) {
    const int32_t tgt = targets[r];
    losses[r] = tgt < 0 ? 0.0f : -logf(fmaxf(p[tgt], 1e-30f));
  }
}

__global__ void softmax_xent_backward_k(float* dlogits, const float* probs, const int32_t* targets,
                                        float dloss, int V, size_t n) {
  FL_GRID_STRIDE(i, n) {
    const size_t r = i / V;
    const int32_t tgt = targets[r];
    if (tgt < 0) continue;
    const int c = static_cast<int>(i % V);
    dlogits[i] += (probs[i] - (c == tgt ? 1.0f : 0.0f)) * dloss;
  }
}

__global__ void loss_sum_k(const float* losses, const int32_t* targets, int N, double* sum,
                           int* count) {
  double s = 0, k = 0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    if (targets[i] >= 0) {
      s += losses[i];
      k += 1;
    }
  }
  s = block_sum(s);
  k = block_sum(k);
  if (threadIdx.x == 0) {
    *sum = s;
    *count = static_cast<int>(k);
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  FL_LAUNCH(embedding_forward_k, blocks_for(n), kThreads, 0)(out, tokens, wte, wpe, T, C, n);
  check_launch("embedding_forward");
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (dwte) {
    FL_LAUNCH(embedding_backward_wte_k, blocks_for(n), kThreads, 0)(dwte, dout, tokens, C, n);
    check_launch("embedding_backward(wte)");
  }
  if (dwpe) {
    FL_LAUNCH(embedding_backward_wpe_k, blocks_for(static_cast<size_t>(T) * C), kThreads, 0)
    (dwpe, dout, B, T, C);
    check_launch("embedding_backward(wpe)");
  }
}

void add_bias(float* out, const float* bias, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  FL_LAUNCH(add_bias_k, blocks_for(n), kThreads, 0)(out, bias, C, n);
  check_launch("add_bias");
}

void bias_backward(float* dbias, const float* dout, int N, int C, float* scratch) {
  const int chunks = (N + kRowChunk - 1) / kRowChunk;
  const dim3 grid(blocks_for(static_cast<size_t>(C)), static_cast<unsigned>(std::max(chunks, 1)));
  FL_LAUNCH(column_partials_k, grid, kThreads, 0)(scratch, dout, N, C);
  check_launch("bias_backward (partials)");
  FL_LAUNCH(column_finish_k, blocks_for(static_cast<size_t>(C)), kThreads, 0)
  (dbias, scratch, chunks, C);
  check_launch("bias_backward");
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  FL_LAUNCH(layernorm_forward_k, blocks_for_rows(N), kThreads, 0)
  (out, mean, rstd, inp, weight, bias, N, C);
  check_launch("layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, float* scratch) {
  FL_LAUNCH(layernorm_backward_input_k, blocks_for_rows(N), kThreads, 0)
  (dinp, dout, inp, weight, mean, rstd, N, C);
  check_launch("layernorm_backward(input)");
  const int chunks = (N + kRowChunk - 1) / kRowChunk;
  float* pw = scratch;
  float* pb = scratch + column_scratch(N, C);
  const dim3 grid(blocks_for(static_cast<size_t>(C)), static_cast<unsigned>(std::max(chunks, 1)));
  FL_LAUNCH(layernorm_params_partials_k, grid, kThreads, 0)(pw, pb, dout, inp, mean, rstd, N, C);
  check_launch("layernorm_backward(weight, bias partials)");
  FL_LAUNCH(column_finish_k, blocks_for(static_cast<size_t>(C)), kThreads, 0)
  (dweight, pw, chunks, C);
  check_launch("layernorm_backward(weight)");
  FL_LAUNCH(column_finish_k, blocks_for(static_cast<size_t>(C)), kThreads, 0)(dbias, pb, chunks, C);
  check_launch("layernorm_backward(bias)");
}

void gelu_forward(float* out, const float* inp, size_t n) {
  FL_LAUNCH(gelu_forward_k, blocks_for(n), kThreads, 0)(out, inp, n);
  check_launch("gelu_forward");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  FL_LAUNCH(gelu_backward_k, blocks_for(n), kThreads, 0)(dinp, inp, dout, n);
  check_launch("gelu_backward");
}

void causal_softmax_forward(float* att, int rows, int T) {
  FL_LAUNCH(causal_softmax_forward_k, blocks_for_rows(rows), kThreads, 0)(att, rows, T);
  check_launch("attention softmax");
}

void causal_softmax_backward(float* datt, const float* att, int rows, int T, float scale) {
  FL_LAUNCH(causal_softmax_backward_k, blocks_for_rows(rows), kThreads, 0)
  (datt, att, rows, T, scale);
  check_launch("attention softmax backward");
}

void split_heads(const float* src, int ld, int parts, void* dst, int dtype, int B, int T, int NH,
                 int hs) {
  const size_t n = static_cast<size_t>(parts) * B * NH * T * hs;
  FL_LAUNCH(split_heads_k, blocks_for(n), kThreads, 0)(src, ld, dst, dtype, B, T, NH, hs, n);
  check_launch("attention split_heads");
}

void merge_heads(float* dst, int ld, int parts, const float* src, bool accumulate, int B, int T,
                 int NH, int hs) {
  const size_t n = static_cast<size_t>(parts) * B * NH * T * hs;
  FL_LAUNCH(merge_heads_k, blocks_for(n), kThreads, 0)(dst, ld, src, accumulate, B, T, NH, hs, n);
  check_launch("attention merge_heads");
}

void kv_decode_attention(float* out, float* kcache, float* vcache, const float* qkv, int B, int NH,
                         int T, int hs, int t, int window) {
  FL_LAUNCH(kv_decode_attention_k, B * NH, 128, (t + 1) * sizeof(float))
  (out, kcache, vcache, qkv, NH, T, hs, t, window > 0 && t - window + 1 > 0 ? t - window + 1 : 0);
  check_launch("kv_decode_attention");
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  FL_LAUNCH(residual_forward_k, blocks_for(n), kThreads, 0)(out, a, b, n);
  check_launch("residual_forward");
}

void residual_backward(float* da, float* db, const float* dout, size_t n) {
  FL_LAUNCH(residual_backward_k, blocks_for(n), kThreads, 0)(da, db, dout, n);
  check_launch("residual_backward");
}

void softmax_xent_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V) {
  FL_LAUNCH(softmax_xent_forward_k, blocks_for_rows(N), kThreads, 0)
  (losses, probs, logits, targets, N, V);
  check_launch("softmax_cross_entropy_forward");
}

void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                           int N, int V) {
  const size_t n = static_cast<size_t>(N) * V;
  FL_LAUNCH(softmax_xent_backward_k, blocks_for(n), kThreads, 0)
  (dlogits, probs, targets, dloss, V, n);
  check_launch("softmax_cross_entropy_backward");
}

void loss_sum(const float* losses, const int32_t* targets, int N, double* sum, int* count) {
  FL_LAUNCH(loss_sum_k, 1, kThreads, 0)(losses, targets, N, sum, count);
  check_launch("loss_sum");
}

}  // namespace fl::cuda::launch
