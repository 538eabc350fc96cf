#include "harness/triage/draft_check.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>

#include <fmt/format.h>

#include "base/private_dir.hpp"
#include "harness/model/scenario.hpp"
#include "harness/run/runner.hpp"

namespace fl::triage {

namespace {

std::string scratch_path(const std::string& name) {
  static std::atomic<int> n{0};
  const std::string dir = fl::private_temp_dir("faultline-triage", "TMPDIR");
  return fmt::format("{}/{}-{}-{}.yaml", dir, name, ::getpid(), n++);
}

}  // namespace

std::string validate_scenario_text(const std::string& yaml) {
  const std::string path = scratch_path("validate");
  std::string err;
  try {
    fl::write_file_atomic(path, yaml);
    const auto s = fl::harness::load_scenario(path, {false, {}});
    fl::harness::check_runnable_here(s);
    fl::harness::load_scenario(path, {true, {}});
  } catch (const std::exception& e) {
    err = e.what();
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
  // The scratch file's name means nothing to the reader: the loader's file:line:col is the draft's.
  for (auto at = err.find(path); at != std::string::npos; at = err.find(path, at)) {
    err.replace(at, path.size(), "draft");
  }
  return err;
}

Validator harness_validator() {
  return [](const std::string& yaml) { return validate_scenario_text(yaml); };
}

std::string write_draft(const std::string& path, const std::string& yaml, bool force) {
  if (force) {
    try {
      fl::write_file_atomic(path, yaml);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }
  // O_EXCL: an existing file (or a link planted there) is never replaced without --force.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return fmt::format("{} exists (--force replaces it)", path);
    return fmt::format("{}: cannot create: {}", path, std::strerror(errno));
  }
  size_t done = 0;
  while (done < yaml.size()) {
    const ssize_t n = ::write(fd, yaml.data() + done, yaml.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return fmt::format("{}: cannot write: {}", path, why);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return fmt::format("{}: cannot write: {}", path, std::strerror(errno));
  return "";
}

std::string write_draft_temp(const std::string& yaml, const std::string& name) {
  const std::string path = scratch_path(name);
  fl::write_file_atomic(path, yaml);
  return path;
}

}  // namespace fl::triage
