// fl::ops: the fault site of each kernel class, then the implementation of the current device.
#include "injector/site.hpp"
#include "kernels/cpu/ops_cpu.hpp"
#include "kernels/device.hpp"
#include "kernels/ops.hpp"
#if defined(FAULTLINE_HAVE_CUDA)
#include "kernels/cuda/op_times.hpp"
#include "kernels/cuda/ops_cuda.hpp"
#endif

namespace fl::ops {

namespace {
bool on_cuda() {
  return current_device().is_cuda();
}

thread_local DType t_gemm_precision = DType::kF32;

// The CPU runs fp32 GEMMs only (it is the reference the GPU's 16-bit GEMMs are checked against).
void require_fp32_gemms_on_cpu(const char* op) {
  if (t_gemm_precision != DType::kF32 && !on_cuda()) {
    raise<ConfigError>(
        "{}: {} GEMMs (tensor cores) are not supported on the cpu device (allowed there: fp32); "
        "16-bit GEMMs need a cuda device",
        op, dtype_name(t_gemm_precision));
  }
}
}  // namespace

void set_gemm_precision(DType t) {
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16) {
    raise<ConfigError>("GEMM precision {} is not supported (allowed: fp32, fp16, bf16)",
                       dtype_name(t));
  }
  t_gemm_precision = t;
}

DType gemm_precision() {
  return t_gemm_precision;
}

void begin_step([[maybe_unused]] int64_t step) {
#if defined(FAULTLINE_HAVE_CUDA)
  fl::cuda::op_times_begin_step(step);
#endif
}

#if defined(FAULTLINE_HAVE_CUDA)
// On a CUDA device each op is timed under FAULTLINE_CUDA_OP_TIMES (kernels/cuda/op_times.hpp).
#define FL_DISPATCH(fn, ...)                   \
  if (on_cuda()) {                             \
    const fl::cuda::OpTimeScope fl_time_(#fn); \
    return cuda::fn(__VA_ARGS__);              \
  }                                            \
  return cpu::fn(__VA_ARGS__)
#else
#define FL_DISPATCH(fn, ...) return cpu::fn(__VA_ARGS__)
#endif

// Each kernel class is a fault site (kernel.gemm, kernel.norm, kernel.attention,
// kernel.elementwise, kernel.loss): a plan can delay a launch, corrupt its input or make it fail
// the way a failed launch does. On a GPU the input is staged through host memory while the site
// is evaluated, which only happens while a plan is armed.
#define FL_KERNEL_SITE(site, input, n)                                                             \
  do {                                                                                             \
    if (fault::g_armed.load(std::memory_order_relaxed) != 0) {                                     \
      HostStage fl_stage_(const_cast<float*>(input), (n));                                         \
      if (FAULTLINE_FAULT_POINT(site, (fault::SiteContext{-1, "", site, -1, fl_stage_.host(), (n), \
                                                          DType::kF32, -1})) ==                    \
          fault::Verdict::kFail) {                                                                 \
        raise("{} launch failed on {} elements on {} (fault injected at this kernel's site)",      \
              site, (n), current_device().str());                                                  \
      }                                                                                            \
    }                                                                                              \
  } while (0)

HostStage::HostStage(float* data, size_t n, bool write_back)
    : data_(data), host_(data), n_(n), write_back_(write_back) {
  if (on_cuda() && data != nullptr) {
    copy_.resize(n);
    to_host(copy_.data(), data, n * sizeof(float));
    host_ = copy_.data();
  }
}

HostStage::~HostStage() {
  if (host_ == data_ || !write_back_) return;
  try {
    from_host(data_, copy_.data(), n_ * sizeof(float));
  } catch (const std::exception&) {
    // The device failed meanwhile; the error surfaces at the next CUDA call of the rank.
  }
}

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  FL_DISPATCH(embedding_forward, out, tokens, wte, wpe, B, T, C);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C) {
  FL_DISPATCH(embedding_backward, dwte, dwpe, dout, tokens, B, T, C);
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  FL_KERNEL_SITE("kernel.gemm", inp, static_cast<size_t>(N) * static_cast<size_t>(C));
  require_fp32_gemms_on_cpu("linear_forward");
  FL_DISPATCH(linear_forward, out, inp, weight, bias, N, C, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  require_fp32_gemms_on_cpu("linear_backward");
  FL_DISPATCH(linear_backward, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  FL_KERNEL_SITE("kernel.norm", inp, static_cast<size_t>(N) * static_cast<size_t>(C));
  FL_DISPATCH(layernorm_forward, out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  FL_DISPATCH(layernorm_backward, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void gelu_forward(float* out, const float* inp, size_t n) {
  FL_KERNEL_SITE("kernel.elementwise", inp, n);
  FL_DISPATCH(gelu_forward, out, inp, n);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  FL_DISPATCH(gelu_backward, dinp, inp, dout, n);
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  FL_KERNEL_SITE("kernel.attention", qkv, static_cast<size_t>(B) * T * 3 * C);
  require_fp32_gemms_on_cpu("attention_forward");
  FL_DISPATCH(attention_forward, out, att, qkv, B, T, C, NH);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH) {
  require_fp32_gemms_on_cpu("attention_backward");
  FL_DISPATCH(attention_backward, dqkv, dout, qkv, att, B, T, C, NH);
}

void kv_decode_attention(float* out, float* kcache, float* vcache, const float* qkv, int B, int NH,
                         int T, int hs, int t, int window) {
  FL_DISPATCH(kv_decode_attention, out, kcache, vcache, qkv, B, NH, T, hs, t, window);
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  FL_DISPATCH(residual_forward, out, a, b, n);
}

void residual_backward(float* da, float* db, const float* dout, size_t n) {
  FL_DISPATCH(residual_backward, da, db, dout, n);
}

void softmax_cross_entropy_forward(float* losses, float* probs, const float* logits,
                                   const int32_t* targets, int N, int V) {
  FL_KERNEL_SITE("kernel.loss", logits, static_cast<size_t>(N) * static_cast<size_t>(V));
  FL_DISPATCH(softmax_cross_entropy_forward, losses, probs, logits, targets, N, V);
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    float dloss, int N, int V) {
  FL_DISPATCH(softmax_cross_entropy_backward, dlogits, probs, targets, dloss, N, V);
}

void add_bias(float* out, const float* bias, int N, int C) {
  FL_DISPATCH(add_bias, out, bias, N, C);
}

void bias_backward(float* dbias, const float* dout, int N, int C) {
  FL_DISPATCH(bias_backward, dbias, dout, N, C);
}

double loss_sum(const float* losses, const int32_t* targets, int N, int* valid) {
  FL_DISPATCH(loss_sum, losses, targets, N, valid);
}

double sum_of_squares(const float* x, size_t n) {
  FL_DISPATCH(sum_of_squares, x, n);
}

double masked_sum_of_squares(const float* x, const uint8_t* skip, size_t n, double divisor) {
  FL_DISPATCH(masked_sum_of_squares, x, skip, n, divisor);
}

void scale(float* x, size_t n, float by) {
  FL_DISPATCH(scale, x, n, by);
}

bool has_non_finite(const float* x, size_t n) {
  FL_DISPATCH(has_non_finite, x, n);
}

void copy(float* dst, const float* src, size_t n) {
  FL_DISPATCH(copy, dst, src, n);
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  FL_DISPATCH(copy_bytes, dst, src, bytes);
}

void zero(void* dst, size_t bytes) {
  FL_DISPATCH(zero, dst, bytes);
}

void round_to_precision(float* x, size_t n, DType t) {
  FL_DISPATCH(round_to_precision, x, n, t);
}

void encode(const float* src, void* dst, DType t, size_t n) {
  FL_DISPATCH(encode, src, dst, t, n);
}

void decode(const void* src, DType t, float* dst, size_t n) {
  FL_DISPATCH(decode, src, t, dst, n);
}

void to_host(void* host, const void* src, size_t bytes) {
  FL_DISPATCH(to_host, host, src, bytes);
}

void from_host(void* dst, const void* host, size_t bytes) {
  FL_DISPATCH(from_host, dst, host, bytes);
}

void synchronize() {
  FL_DISPATCH(synchronize);
}

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, int64_t t,
                  const AdamW& hp) {
  FL_DISPATCH(adamw_update, param, grad, m, v, n, t, hp);
}

void sgd_update(float* param, const float* grad, float* momentum_buf, size_t n, const Sgd& hp) {
  FL_DISPATCH(sgd_update, param, grad, momentum_buf, n, hp);
}

}  // namespace fl::ops
