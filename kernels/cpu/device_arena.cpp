#include "kernels/device_arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "base/error.hpp"

namespace fl {

DeviceArena* DeviceArena::instance() {
  static std::unique_ptr<DeviceArena> arena = [] {
    const std::string path = kDeviceArena.get();
    return path.empty() ? nullptr : std::make_unique<DeviceArena>(path);
  }();
  return arena.get();
}

DeviceArena::DeviceArena(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    raise<ConfigError>("{}={}: cannot open the device arena: {}", kDeviceArena.env(), path,
                       std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    raise<ConfigError>("{}={}: the device arena is empty (allowed: a pre-allocated file)",
                       kDeviceArena.env(), path);
  }
  size_ = static_cast<size_t>(st.st_size) / 64 * 64;
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    raise<ConfigError>("{}={}: cannot map the device arena: {}", kDeviceArena.env(), path,
                       std::strerror(err));
  }
  base_ = static_cast<char*>(p);
  free_[0] = size_;
}

DeviceArena::~DeviceArena() {
  if (base_) ::munmap(base_, size_);
}

void* DeviceArena::allocate(size_t bytes) {
  const size_t need = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > need) free_[off + need] = len - need;
    used_[off] = need;
    return base_ + off;
  }
  return nullptr;
}

void DeviceArena::free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto off = static_cast<size_t>(static_cast<char*>(p) - base_);
  auto u = used_.find(off);
  if (u == used_.end()) raise("device arena: freeing {} bytes into it that it never gave", off);
  size_t start = off, len = u->second;
  used_.erase(u);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
}

bool DeviceArena::owns(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return c >= base_ && c < base_ + size_;
}

size_t DeviceArena::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [off, len] : used_) n += len;
  return n;
}

}  // namespace fl
