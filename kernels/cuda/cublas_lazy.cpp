#include "kernels/cuda/cublas_lazy.hpp"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "base/error.hpp"

#ifndef FAULTLINE_CUBLAS_PATH
#define FAULTLINE_CUBLAS_PATH ""
#endif
#ifndef FAULTLINE_CUBLAS_SONAME
#define FAULTLINE_CUBLAS_SONAME "libcublas.so"
#endif

// The symbol a cublas_v2.h name stands for ("cublasSgemm" -> "cublasSgemm_v2").
#define FL_CUBLAS_NAME_(x) #x
#define FL_CUBLAS_NAME(x) FL_CUBLAS_NAME_(x)

namespace fl::cuda {
namespace {

std::atomic<bool> g_loaded{false};

void* open_library(std::string* tried) {
  for (const char* name : {FAULTLINE_CUBLAS_PATH, FAULTLINE_CUBLAS_SONAME}) {
    if (name[0] == '\0') continue;
    // RTLD_LOCAL: nothing else in the process binds to cuBLAS's symbols by accident.
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    const char* why = dlerror();
    *tried += fmt::format("{}{} ({})", tried->empty() ? "" : "; ", name, why ? why : "unknown");
  }
  return nullptr;
}

template <class Fn>
void resolve(void* lib, Fn& fn, const char* symbol) {
  dlerror();
  void* p = dlsym(lib, symbol);
  if (p == nullptr) {
    const char* why = dlerror();
    raise<DeviceError>("cuBLAS has no symbol {} ({}); this build expects cuBLAS {}", symbol,
                       why ? why : "null", FAULTLINE_CUBLAS_SONAME);
  }
  fn = reinterpret_cast<Fn>(p);
}

BlasApi load() {
  std::string tried;
  void* lib = open_library(&tried);
  if (lib == nullptr) {
    raise<DeviceError>("cannot load cuBLAS for a GPU GEMM: tried {}", tried);
  }
  BlasApi api;
  resolve(lib, api.create, FL_CUBLAS_NAME(cublasCreate));
  resolve(lib, api.set_math_mode, FL_CUBLAS_NAME(cublasSetMathMode));
  resolve(lib, api.status_name, FL_CUBLAS_NAME(cublasGetStatusName));
  resolve(lib, api.status_string, FL_CUBLAS_NAME(cublasGetStatusString));
  resolve(lib, api.sgemm, FL_CUBLAS_NAME(cublasSgemm));
  resolve(lib, api.sgemm_strided_batched, FL_CUBLAS_NAME(cublasSgemmStridedBatched));
  resolve(lib, api.gemm_ex, FL_CUBLAS_NAME(cublasGemmEx));
  resolve(lib, api.gemm_strided_batched_ex, FL_CUBLAS_NAME(cublasGemmStridedBatchedEx));
  return api;  // the library stays open for the life of the process
}

}  // namespace

const BlasApi& blas_api() {
  static const BlasApi api = [] {
    BlasApi a = load();
    g_loaded.store(true);
    return a;
  }();
  return api;
}

bool blas_loaded() {
  return g_loaded.load();
}

}  // namespace fl::cuda
