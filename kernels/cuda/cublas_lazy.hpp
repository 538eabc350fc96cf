// cuBLAS, opened on first use. Linking libcublas into every worker made each process start cost
// about 110 ms of CPU (libcublasLt's 540 MB of initialisers and relocations) even on CPU ranks
// that never touch a GPU: 14 s of CPU for a 128-rank launch on one machine. The workers now load
// it with dlopen the first time a GPU GEMM needs it; the rest of the CUDA runtime stays linked.
#pragma once

#include <cublas_v2.h>

namespace fl::cuda {

// The C entry points of the 16-bit GEMMs (in C++ the header also declares inline overloads
// taking cudaDataType as the compute type, so decltype cannot name them).
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t,
                                                  cublasOperation_t, int, int, int, const void*,
                                                  const void*, cudaDataType, int, long long,
                                                  const void*, cudaDataType, int, long long,
                                                  const void*, void*, cudaDataType, int, long long,
                                                  int, cublasComputeType_t, cublasGemmAlgo_t);

// The cuBLAS entry points the kernels use (the _v2 names cublas_v2.h maps to).
struct BlasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  GemmExFn gemm_ex = nullptr;
  GemmStridedBatchedExFn gemm_strided_batched_ex = nullptr;
};

// Loads cuBLAS once (thread-safe): the library this build was linked against
// (FAULTLINE_CUBLAS_PATH), else its soname on the loader's path. Throws DeviceError naming what
// was tried and dlerror's reason when it cannot be loaded or lacks a symbol.
const BlasApi& blas_api();

// True once blas_api() has loaded the library (tests: a CPU run never loads it).
bool blas_loaded();

}  // namespace fl::cuda
