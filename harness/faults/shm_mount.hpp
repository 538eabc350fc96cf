// What the `shm` fault runs to give ranks a /dev/shm of `bytes`, and to take it away, the same on
// the harness's machine (in the run's mount namespace, harness/faults/shm.cpp) and in a host's
// agent (in a mount namespace it holds on its host, ShmMount in shm.cpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace fl::harness::faults {

inline constexpr const char* kShmPath = "/dev/shm";
inline constexpr const char* kShmSource = "faultline-shm";

inline std::vector<std::string> shm_mount_argv(int64_t bytes) {
  return {"mount",    "-t",    "tmpfs", "-o", fmt::format("size={},mode=1777,nosuid,nodev", bytes),
          kShmSource, kShmPath};
}
inline std::vector<std::string> shm_umount_argv() {
  return {"umount", "-l", kShmPath};
}
// argv run inside the mount namespace `holder` is in.
inline std::vector<std::string> in_mount_of(pid_t holder, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"nsenter", fmt::format("--mount=/proc/{}/ns/mnt", holder)});
  return argv;
}

}  // namespace fl::harness::faults
