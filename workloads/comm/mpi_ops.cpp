// The MPI backend's datatypes and reductions: fp16 and bf16 travel as 16-bit words and are reduced
// by user-defined MPI ops that do the arithmetic in fp32 and round back, as a GPU reduction
// kernel would.
#include <limits>

#include "workloads/comm/mpi_detail.hpp"

namespace fl::comm::mpi {

std::atomic<bool> g_dirty{false};

void check(int rc, const char* call, const std::string& group, int world_rank) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  raise<CommError>("[rank {}] {} failed on group '{}': {}", world_rank, call, group,
                   std::string(msg, static_cast<size_t>(len)));
}

MPI_Datatype type_of(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF16:
      return MPI_UINT16_T;
    case DType::kBF16:
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kF64:
      return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

// User-defined reductions for the 16-bit float formats.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), int Kind>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = ToF(a[i]);
    float y = ToF(b[i]);
    float r = Kind == 0 ? x + y : Kind == 1 ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = FromF(r);
  }
}

int reduce_kind(ReduceOp op) {
  return op == ReduceOp::kMax ? 1 : op == ReduceOp::kMin ? 2 : 0;
}

// The 16-bit reduction for (dtype, op); avg reduces as sum and is divided afterwards.
MPI_User_function* reduce16_fn(DType t, ReduceOp op) {
  static MPI_User_function* const f16[3] = {&reduce16<half_to_float, float_to_half, 0>,
                                            &reduce16<half_to_float, float_to_half, 1>,
                                            &reduce16<half_to_float, float_to_half, 2>};
  static MPI_User_function* const bf16[3] = {&reduce16<bf16_to_float, float_to_bf16, 0>,
                                             &reduce16<bf16_to_float, float_to_bf16, 1>,
                                             &reduce16<bf16_to_float, float_to_bf16, 2>};
  return (t == DType::kF16 ? f16 : bf16)[reduce_kind(op)];
}

struct Ops16 {
  MPI_Op f16[3];
  MPI_Op bf16[3];
};

const Ops16& ops16() {
  static Ops16 ops = [] {
    Ops16 o{};
    const ReduceOp kinds[3] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
    for (int k = 0; k < 3; ++k) {
      MPI_Op_create(reduce16_fn(DType::kF16, kinds[k]), 1, &o.f16[k]);
      MPI_Op_create(reduce16_fn(DType::kBF16, kinds[k]), 1, &o.bf16[k]);
    }
    return o;
  }();
  return ops;
}

MPI_Op op_of(ReduceOp op, DType t) {
  int k = reduce_kind(op);  // avg = sum, then divide
  if (t == DType::kF16) return ops16().f16[k];
  if (t == DType::kBF16) return ops16().bf16[k];
  return k == 0 ? MPI_SUM : k == 1 ? MPI_MAX : MPI_MIN;
}

template <class T>
void divide_ints(void* data, size_t n, int by) {
  auto* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / by);
}

void divide_in_place(void* data, size_t n, DType t, int by) {
  switch (t) {
    case DType::kF32: {
      auto* p = static_cast<float*>(data);
      for (size_t i = 0; i < n; ++i) p[i] /= static_cast<float>(by);
      return;
    }
    case DType::kF16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = float_to_half(half_to_float(p[i]) / by);
      return;
    }
    case DType::kBF16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = float_to_bf16(bf16_to_float(p[i]) / by);
      return;
    }
    case DType::kI32:
      divide_ints<int32_t>(data, n, by);
      return;
    case DType::kI64:
      divide_ints<int64_t>(data, n, by);
      return;
    case DType::kU8:
      divide_ints<uint8_t>(data, n, by);
      return;
    case DType::kF64: {
      auto* p = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) p[i] /= static_cast<double>(by);
      return;
    }
  }
}

int checked_count(size_t n, const char* what) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
    raise<CommError>("{}: count {} exceeds the MPI limit of {} elements per op", what, n,
                     std::numeric_limits<int>::max());
  }
  return static_cast<int>(n);
}

}  // namespace fl::comm::mpi
