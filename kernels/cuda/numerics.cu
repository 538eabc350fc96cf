// CUDA kernels of the optimizer and of reduced precision: sums of squares (the gradient norm),
// scaling, the overflow check, fp16/bf16 rounding, encoding and decoding, AdamW and SGD. Element-
// wise grid-stride loops; the reductions add per-thread partial sums into one device value.
#include "kernels/cuda/kernel_common.cuh"

namespace fl::cuda::launch {

namespace {

// sum((x / d)^2) over the elements skip leaves in, as sum(x^2) / d^2: the division once per block
// (in double, x^2 cannot overflow). Four independent loads in flight per thread: with one, each
// thread waits out a memory round trip per element and the pass ran at a third of the bandwidth.
__global__ void sum_of_squares_k(const float* x, const uint8_t* skip, size_t n, double divisor,
                                 double* out) {
  constexpr int kUnroll = 4;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  double s = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += kUnroll * stride) {
    float v[kUnroll];
    for (int k = 0; k < kUnroll; ++k) {
      const size_t j = i + k * stride;
      v[k] = j < n ? x[j] : 0.0f;
    }
    if (skip != nullptr) {
      for (int k = 0; k < kUnroll; ++k) {
        const size_t j = i + k * stride;
        if (j < n && skip[j] != 0) v[k] = 0.0f;
      }
    }
    for (int k = 0; k < kUnroll; ++k) s += static_cast<double>(v[k]) * v[k];
  }
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(out, s / (divisor * divisor));
}

__global__ void scale_k(float* x, size_t n, float by) {
  FL_GRID_STRIDE(i, n) x[i] *= by;
}

__global__ void has_non_finite_k(const float* x, size_t n, int* flag) {
  FL_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1;
  }
}

__device__ __forceinline__ float round_f16(float x) {
  return __half2float(__float2half_rn(x));
}
__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

__global__ void round_to_k(float* x, size_t n, int dtype) {
  FL_GRID_STRIDE(i, n) x[i] = dtype == kF16 ? round_f16(x[i]) : round_bf16(x[i]);
}

__global__ void encode_k(const float* src, void* dst, int dtype, size_t n) {
  FL_GRID_STRIDE(i, n) {
    if (dtype == kF16) {
      static_cast<__half*>(dst)[i] = __float2half_rn(src[i]);
    } else {
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(src[i]);
    }
  }
}

__global__ void decode_k(const void* src, int dtype, float* dst, size_t n) {
  FL_GRID_STRIDE(i, n) {
    dst[i] = dtype == kF16 ? __half2float(static_cast<const __half*>(src)[i])
                           : __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
  }
}

__global__ void adamw_k(float* param, const float* grad, float* m, float* v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, float c1,
                        float c2) {
  FL_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mh = mi / c1;
    const float vh = vi / c2;
    param[i] -= lr * (mh / (sqrtf(vh) + eps) + weight_decay * param[i]);
  }
}

__global__ void sgd_k(float* param, const float* grad, float* buf, size_t n, float lr,
                      float momentum, float weight_decay) {
  FL_GRID_STRIDE(i, n) {
    float d = grad[i] + weight_decay * param[i];
    if (momentum > 0.0f) {
      d = momentum * buf[i] + d;
      buf[i] = d;
    }
    param[i] -= lr * d;
  }
}

}  // namespace

void sum_of_squares(const float* x, const uint8_t* skip, size_t n, double divisor, double* out) {
  FL_LAUNCH(sum_of_squares_k, std::min(blocks_for(n), 1024u), kThreads, 0)
  (x, skip, n, divisor, out);
  check_launch("sum_of_squares");
}

void scale(float* x, size_t n, float by) {
  FL_LAUNCH(scale_k, blocks_for(n), kThreads, 0)(x, n, by);
  check_launch("scale");
}

void has_non_finite(const float* x, size_t n, int* flag) {
  FL_LAUNCH(has_non_finite_k, blocks_for(n), kThreads, 0)(x, n, flag);
  check_launch("has_non_finite");
}

void round_to(float* x, size_t n, int dtype) {
  FL_LAUNCH(round_to_k, blocks_for(n), kThreads, 0)(x, n, dtype);
  check_launch("round_to_precision");
}

void encode(const float* src, void* dst, int dtype, size_t n) {
  FL_LAUNCH(encode_k, blocks_for(n), kThreads, 0)(src, dst, dtype, n);
  check_launch("encode");
}

void decode(const void* src, int dtype, float* dst, size_t n) {
  FL_LAUNCH(decode_k, blocks_for(n), kThreads, 0)(src, dtype, dst, n);
  check_launch("decode");
}

void adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float c1, float c2) {
  FL_LAUNCH(adamw_k, blocks_for(n), kThreads, 0)
  (param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, c1, c2);
  check_launch("adamw_update");
}

void sgd(float* param, const float* grad, float* buf, size_t n, float lr, float momentum,
         float weight_decay) {
  FL_LAUNCH(sgd_k, blocks_for(n), kThreads, 0)(param, grad, buf, n, lr, momentum, weight_decay);
  check_launch("sgd_update");
}

}  // namespace fl::cuda::launch
