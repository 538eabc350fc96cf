#include "base/subprocess.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"

extern "C" char** environ;

namespace fl {

ToolOutcome run_tool_status(const std::vector<std::string>& argv) {
  if (argv.empty()) raise<Error>("run_tool: an empty command");
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) raise<Error>("pipe: {}", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    raise<Error>("cannot run {}: {}", argv[0], std::strerror(rc));
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), std::move(text)};
}

std::string run_tool(const std::vector<std::string>& argv) {
  ToolOutcome r = run_tool_status(argv);
  if (r.status != 0) {
    while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
    raise<Error>("`{}` failed ({}): {}", fmt::join(argv, " "),
                 r.status < 128 ? fmt::format("exit {}", r.status)
                                : fmt::format("signal {}", r.status - 128),
                 r.output);
  }
  return std::move(r.output);
}

}  // namespace fl
