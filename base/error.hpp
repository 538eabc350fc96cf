// Error types shared by every component. Errors carry their full context in the message (rank,
// op, file, key, sizes) because the message is what a user and a log classifier see.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace fl {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A setting (environment variable) has a value that cannot be parsed or is out of range.
class SettingError : public Error {
 public:
  using Error::Error;
};

// A configuration the program cannot run with (impossible layout, unsupported option).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be written or loaded: missing, corrupt, or from another layout/version.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A rank cannot use the device it was assigned (absent, not visible, lost).
class DeviceError : public Error {
 public:
  using Error::Error;
};

template <class E = Error, class... Args>
[[noreturn]] void raise(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace fl
