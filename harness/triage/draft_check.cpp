#include "harness/triage/draft_check.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>

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

// The draft with its whole-line comments left out: YAML comments carry no value, so two drafts
// that differ only in them (each names its own issue's source lines) load alike. A comment line
// holding a carriage return stays in (see below).
std::string without_comment_lines(const std::string& yaml) {
  std::string out;
  out.reserve(yaml.size());
  for (size_t at = 0; at < yaml.size();) {
    const size_t end = std::min(yaml.find('\n', at), yaml.size());
    const size_t first = yaml.find_first_not_of(" \t", at);
    // A comment holding a '\r' is kept: yaml-cpp ends a line (and the comment) there, so what
    // follows it is content (a draft's comments quote the lines).
    const bool comment = first < end && yaml[first] == '#' && yaml.find('\r', first) >= end;
    if (!comment) out.append(yaml, at, end - at).push_back('\n');
    at = end + 1;
  }
  return out;
}

// A validator remembers the drafts it accepted (without their comment lines): an eval drafts the
// same base with the same adaptations for many issues (stop 72: 1815 tune drafts, each validated
// twice by the loader, were 48% of the eval's time). A refusal is always validated again, so its
// message keeps the draft's own line numbers.
Validator harness_validator() {
  struct Accepted {
    std::mutex mu;
    std::set<std::string> texts;
  };
  auto accepted = std::make_shared<Accepted>();
  return [accepted](const std::string& yaml) {
    std::string key = without_comment_lines(yaml);
    {
      std::lock_guard<std::mutex> lock(accepted->mu);
      if (accepted->texts.count(key) != 0) return std::string();
    }
    std::string err = validate_scenario_text(yaml);
    if (err.empty()) {
      std::lock_guard<std::mutex> lock(accepted->mu);
      accepted->texts.insert(std::move(key));
    }
    return err;
  };
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
