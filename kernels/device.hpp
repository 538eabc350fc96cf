// Where a rank computes. Model and trainer code never branch on the device: they allocate tensors
// through the accountant of their device and call fl::ops, which runs the CPU kernels or the CUDA
// kernels of the calling thread's current device. CPU is the default everywhere.
#pragma once

#include <cstdint>
#include <string>

#include "base/error.hpp"
#include "base/settings.hpp"

namespace fl {

enum class DeviceKind : uint8_t { kCpu = 0, kCuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  std::string str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }
  bool operator==(const Device&) const = default;
};

FAULTLINE_SETTING(kComputeDevice, std::string, "FAULTLINE_DEVICE", "cpu",
                  "Where workers compute: cpu, or cuda (the rank's GPU)");

// A CUDA call failed. The message names rank, device, the op or kernel, and the CUDA error.
class CudaError : public DeviceError {
 public:
  CudaError(std::string msg, int code, bool sticky)
      : DeviceError(std::move(msg)), code_(code), sticky_(sticky) {}
  int code() const { return code_; }
  // A sticky error (illegal address, launch failure...) leaves the context unusable: every later
  // CUDA call of the process fails too, so the rank must end.
  bool sticky() const { return sticky_; }

 private:
  int code_;
  bool sticky_;
};

// The calling thread's compute device (CPU until set). Setting a CUDA device binds the thread to
// it (cudaSetDevice) and fails with DeviceError when the build has no CUDA, no device is visible
// or the ordinal is out of range.
Device current_device();
void set_current_device(Device d);

// Sets a device for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device d) : prev_(current_device()) { set_current_device(d); }
  ~DeviceGuard() { set_current_device(prev_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device prev_;
};

// Parses "cpu", "cuda" (device `default_index`) or "cuda:N"; a DeviceError names what is allowed.
Device parse_device(std::string_view text, int default_index);

// CUDA devices visible to this process (0 without CUDA, a driver or a device).
int cuda_device_count();
// 10 · major + minor of a CUDA device (90 for an H100); 0 without CUDA or that device.
int cuda_compute_capability(int device);
bool built_with_cuda();

}  // namespace fl
