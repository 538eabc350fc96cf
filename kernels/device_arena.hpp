// Device memory of a CPU rank backed by a file that someone else has already paid for. On CPU
// ranks the simulated device and the host are the same RAM, so a cgroup memory limit on a rank
// would count its "device" tensors too. With FAULTLINE_DEVICE_ARENA naming a tmpfs file that a
// process outside the rank's cgroup created and pre-faulted (the harness's memory_limit fault
// with `device_arena`), every tensor of a CPU device accountant is carved out of that file:
// shared-memory pages stay charged to the cgroup that first faulted them in, so the rank's
// memory cgroup sees only its own host-side allocations (offloaded optimizer state, MPI, the
// process) and the kernel OOM-kills the rank when those pass its limit.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "base/settings.hpp"

namespace fl {

FAULTLINE_SETTING(kDeviceArena, std::string, "FAULTLINE_DEVICE_ARENA", "",
                  "File (tmpfs, pre-faulted outside the rank's cgroup) whose pages back the CPU "
                  "device's tensors; empty: tensors are ordinary heap memory");

class DeviceArena {
 public:
  // The arena of FAULTLINE_DEVICE_ARENA, mapped at first use; null when the setting is empty.
  // A file that cannot be opened or mapped raises ConfigError naming the setting.
  static DeviceArena* instance();

  explicit DeviceArena(const std::string& path);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // 64-byte aligned block of at least `bytes` (first fit); null when no free range is that large.
  void* allocate(size_t bytes);
  void free(void* p);
  bool owns(const void* p) const;
  size_t size() const { return size_; }
  size_t in_use() const;

 private:
  std::string path_;
  char* base_ = nullptr;
  size_t size_ = 0;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length, coalesced
  std::map<size_t, size_t> used_;  // offset -> length
};

}  // namespace fl
