// A small tensor: dtype, shape, device and reference-counted storage whose bytes are accounted by
// a MemoryAccountant for their whole life. Kernels take raw pointers; tensors own and account.
// A tensor lives on its accountant's device: host memory, or a block of that GPU's caching
// allocator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "kernels/device.hpp"
#include "kernels/memory.hpp"

namespace fl {

class Storage {
 public:
  Storage(size_t bytes, MemoryAccountant& acct, std::string_view what);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return acct_->device(); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryAccountant* acct_;
  MemCategory category_ = MemCategory::kBuffers;
};

class Tensor {
 public:
  Tensor() = default;
  // Zero-initialised tensor of `shape`, accounted to `acct` under the name `what`.
  static Tensor zeros(std::vector<int64_t> shape, DType dtype, std::string_view what,
                      MemoryAccountant& acct = MemoryAccountant::cpu());

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t numel() const;
  size_t bytes() const { return numel() * dtype_size(dtype_); }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  void* raw() const { return storage_ ? storage_->data() : nullptr; }
  template <class T>
  T* data() const {
    return static_cast<T*>(raw());
  }
  float* f32() const;  // checked: the tensor must be fp32
  void release() { storage_.reset(); }

 private:
  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace fl
