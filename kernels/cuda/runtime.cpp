#include "kernels/cuda/runtime.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "injector/site.hpp"
#include "kernels/cuda/cublas_lazy.hpp"
#include "kernels/cuda/launch.hpp"

namespace fl::cuda {

bool is_sticky(int code) {
  switch (static_cast<cudaError_t>(code)) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

std::string error_message(int code, std::string_view op, int rank, int device) {
  const auto e = static_cast<cudaError_t>(code);
  std::string msg = fmt::format("[rank {}] CUDA error on cuda:{} in {}: {} ({})", rank, device, op,
                                cudaGetErrorName(e), cudaGetErrorString(e));
  if (is_sticky(code)) {
    msg +=
        "; this error is sticky: the CUDA context of the process is unusable and the rank ends. "
        "Kernel faults are reported asynchronously, so the faulting kernel may be an earlier one "
        "(CUDA_LAUNCH_BLOCKING=1 attributes it to its launch)";
  }
  return msg;
}

void raise_error(cudaError_t e, std::string_view op) {
  int device = -1;
  cudaGetDevice(&device);
  if (!is_sticky(e)) cudaGetLastError();  // clear a non-sticky error so the rank can go on
  throw CudaError(error_message(e, op, fault::current_rank(), device), e, is_sticky(e));
}

void check_blas(cublasStatus_t s, std::string_view op) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  int device = -1;
  cudaGetDevice(&device);
  throw CudaError(
      fmt::format("[rank {}] cuBLAS error on cuda:{} in {}: {} ({})", fault::current_rank(), device,
                  op, blas_api().status_name(s), blas_api().status_string(s)),
      static_cast<int>(s), false);
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), fmt::format("kernel launch of {}", kernel));
}

int device_count() {
  return cuda_device_count();
}

namespace {
thread_local int t_device = -1;

struct DeviceState {
  explicit DeviceState(int d) : raw(d), alloc(raw) {}
  struct Raw final : RawDeviceMemory {
    explicit Raw(int d) : device(d) {}
    void* allocate(size_t bytes, std::string& error) override {
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, bytes);
      if (e == cudaSuccess) return p;
      if (is_sticky(e)) raise_error(e, "cudaMalloc");
      cudaGetLastError();
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      error = fmt::format("cudaMalloc of {} failed: {} ({}); the device has {} free of {}",
                          format_bytes(bytes), cudaGetErrorName(e), cudaGetErrorString(e),
                          format_bytes(free), format_bytes(total));
      return nullptr;
    }
    void release(void* p) override { cudaFree(p); }
    int device;
  } raw;
  CachingAllocator alloc;
  cublasHandle_t handle = nullptr;
};

std::mutex g_mu;
std::map<int, std::unique_ptr<DeviceState>>& states() {
  static auto* s = new std::map<int, std::unique_ptr<DeviceState>>();  // lives to process exit
  return *s;
}

DeviceState& state(int device) {
  std::lock_guard lock(g_mu);
  auto& s = states()[device];
  if (!s) s = std::make_unique<DeviceState>(device);
  return *s;
}
}  // namespace

void activate(int device) {
  if (t_device == device) return;
  const int n = device_count();
  if (n == 0) {
    int driver = 0;
    cudaDriverGetVersion(&driver);
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    cudaGetLastError();
    raise<DeviceError>(
        "[rank {}] cuda:{} requested but no CUDA device is visible (cudaGetDeviceCount: {}: {}; "
        "driver version {}); run on a GPU machine or use the cpu device",
        fault::current_rank(), device, cudaGetErrorName(e), cudaGetErrorString(e), driver);
  }
  if (device < 0 || device >= n) {
    raise<DeviceError>("[rank {}] invalid device ordinal: cuda:{} requested, {} device(s) visible",
                       fault::current_rank(), device, n);
  }
  check(cudaSetDevice(device), "cudaSetDevice");
  t_device = device;
}

int current_index() {
  return t_device;
}

cublasHandle_t blas() {
  DeviceState& s = state(t_device);
  std::lock_guard lock(g_mu);
  if (s.handle == nullptr) {
    check_blas(blas_api().create(&s.handle), "cublasCreate");
    // fp32 GEMMs in fp32 (no TF32), as the CPU path computes them.
    check_blas(blas_api().set_math_mode(s.handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  return s.handle;
}

CachingAllocator& allocator(int device) {
  return state(device).alloc;
}

void* device_allocate(int device, size_t bytes, std::string_view what, MemoryAccountant& acct) {
  if (t_device != device) activate(device);
  return allocator(device).allocate(bytes, what, acct);
}

void device_free(int device, void* p, MemoryAccountant& acct) {
  allocator(device).free(p, acct);
}

Scratch::Scratch(size_t bytes, std::string_view what)
    : device_(t_device),
      p_(device_allocate(device_, bytes, what, MemoryAccountant::cuda(device_))) {}

Scratch::~Scratch() {
  device_free(device_, p_, MemoryAccountant::cuda(device_));
}

}  // namespace fl::cuda
