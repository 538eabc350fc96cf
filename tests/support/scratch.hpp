// Scratch files and folders a test process makes under the temp directory, removed with their
// contents when that process exits. Tests name them by process id so that two test binaries
// under `ctest -j` never share one; before this, each run left its folders in /tmp (thousands
// after a few hundred runs). A forked child that exits removes nothing of its parent's.
// FAULTLINE_KEEP_TEST_FILES set (to any value) keeps them, to look at after a failure.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fl::test {

class ScratchRegistry {
 public:
  static ScratchRegistry& get() {
    static ScratchRegistry r;
    return r;
  }
  void add(std::filesystem::path p) {
    std::lock_guard<std::mutex> lock(mu_);
    paths_.push_back(std::move(p));
  }
  ScratchRegistry(const ScratchRegistry&) = delete;
  ScratchRegistry& operator=(const ScratchRegistry&) = delete;
  ~ScratchRegistry() {
    if (::getpid() != owner_ || std::getenv("FAULTLINE_KEEP_TEST_FILES") != nullptr) return;
    for (const auto& p : paths_) {
      std::error_code ec;  // a mount a test left behind is emptied, then removal stops at it
      std::filesystem::remove_all(p, ec);
    }
  }

 private:
  ScratchRegistry() : owner_(::getpid()) {}
  pid_t owner_;
  std::mutex mu_;
  std::vector<std::filesystem::path> paths_;
};

// `p`, to be removed with its contents when this process exits.
inline std::filesystem::path removed_at_exit(std::filesystem::path p) {
  ScratchRegistry::get().add(p);
  return p;
}

// An empty directory for one test, unique per process and test: /tmp/faultline-<what>-<pid>-<name>,
// removed with its contents when the process exits.
inline std::string fresh_test_dir(const std::string& what, const std::string& test_name) {
  auto dir =
      removed_at_exit(std::filesystem::temp_directory_path() /
                      ("faultline-" + what + "-" + std::to_string(::getpid()) + "-" + test_name));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace fl::test
