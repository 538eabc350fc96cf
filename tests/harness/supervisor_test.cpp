// Supervisor::spawn's refusals: a process that cannot start is an Error naming the process, what
// could not be opened or run and why, and spawn leaves no descriptor of its own open behind.
#include <gtest/gtest.h>

// boost 1.74 asio uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <string>

#include "base/error.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// The message of the Error that spawn(spec) throws ("" when it starts the process).
std::string spawn_error(Supervisor& sup, const ProcessSpec& spec) {
  try {
    sup.spawn(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Supervisor, AProcessThatCannotStartIsAnErrorNamingWhatFailed) {
  boost::asio::io_context io;
  Supervisor sup(
      io, [](int, const std::string&, const std::string&, const std::string&) {},
      [](const ExitInfo&) {});
  const size_t before = open_fds();
  ProcessSpec spec;
  spec.name = "rank 3";
  EXPECT_EQ(spawn_error(sup, spec), "rank 3: nothing to run (empty argv)");
  spec.argv = {"/nonexistent/fl-train"};
  EXPECT_EQ(spawn_error(sup, spec),
            "rank 3: cannot start /nonexistent/fl-train: No such file or directory");
  spec.argv = {"/bin/true"};
  spec.cwd = "/nonexistent/dir";
  EXPECT_EQ(spawn_error(sup, spec), "rank 3: cannot start /bin/true: No such file or directory");
  spec.cwd.clear();
  spec.namespaces = {"/nonexistent/ns/net"};
  EXPECT_EQ(spawn_error(sup, spec),
            "rank 3: cannot open namespace /nonexistent/ns/net: No such file or directory");
  spec.namespaces = {"/proc/self/ns/net"};
  spec.cgroup_procs = {"/nonexistent/cgroup.procs"};
  EXPECT_EQ(spawn_error(sup, spec),
            "rank 3: cannot open /nonexistent/cgroup.procs: No such file or directory");
  EXPECT_EQ(open_fds(), before);
}

}  // namespace
}  // namespace fl::harness
