#include "harness/run/launch_args.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "base/error.hpp"
#include "base/settings.hpp"

extern "C" char** environ;

namespace fl::harness {

FAULTLINE_SETTING(kBinDir, std::string, "FAULTLINE_BIN_DIR", "",
                  "Directory holding fl-train and fl-infer (default: this build's)");

std::string worker_binary(const std::string& kind) {
  const std::string dir = kBinDir.get();
  const std::string name = kind == "infer" ? "fl-infer" : "fl-train";
  if (!dir.empty()) return dir + "/" + name;
  return kind == "infer" ? FAULTLINE_INFER_BIN : FAULTLINE_TRAIN_BIN;
}

std::string make_run_id(const std::string& name) {
  const auto now = std::chrono::system_clock::now();
  std::random_device rd;
  return fmt::format("{:%Y%m%d-%H%M%S}-{}-{:04x}",
                     fmt::localtime(std::chrono::system_clock::to_time_t(now)), name,
                     rd() & 0xffff);
}

namespace {
// Can a listener bind 127.0.0.1:port right now?
bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}
}  // namespace

// The rendezvous port is chosen below the kernel's ephemeral range: ports there are handed to
// every outgoing connection (MPI, gRPC, other runs' stores), so one that is free now may be a
// client's source port by the time rank 0 listens (seen once in 20 smoke suites: EADDRINUSE).
// Below the range only listeners take ports; concurrent harnesses pick at random.
int free_port() {
  int low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low;
  std::random_device rd;
  std::mt19937 gen(rd());
  if (low > 12000) {
    std::uniform_int_distribution<int> pick(10000, low - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const int port = pick(gen);
      if (bindable(port)) return port;
    }
  }
  // No room below the range: let the kernel choose.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> worker_args(const Scenario& s, const std::string& run_dir,
                                     const std::string& resume_from) {
  std::vector<std::string> a{worker_binary(s.kind), "--model", s.model};
  auto add = [&](const char* k, auto v) {
    a.push_back(k);
    a.push_back(fmt::format("{}", v));
  };
  add("--dp", s.dp);
  add("--tp", s.tp);
  add("--pp", s.pp);
  add("--device", s.device);
  if (s.kind == "infer") {
    if (!resume_from.empty()) add("--checkpoint", resume_from);
    add("--requests", s.requests);
    add("--prompt-len", s.prompt_len);
    add("--new-tokens", s.new_tokens);
    add("--seed", s.seed);
  } else {
    add("--zero", s.zero);
    add("--steps", s.steps);
    add("--precision", s.precision);
    add("--micro-batch", s.micro_batch);
    add("--grad-accum", s.grad_accum);
    add("--lr", s.lr);
    add("--clip", s.clip);
    add("--schedule", s.schedule);
    add("--eval-every", s.eval_every);
    add("--loss-scale", s.loss_scale);
    add("--min-loss-scale", s.min_loss_scale);
    // The numeric knobs go on the command line only where a scenario sets them, so the launch
    // of every scenario that does not stays as it was.
    if (s.loss_scale_window != 1000) add("--loss-scale-window", s.loss_scale_window);
    if (s.hysteresis != 1) add("--hysteresis", s.hysteresis);
    if (!s.raise_error_at_min_scale) add("--raise-error-at-min-scale", "false");
    if (s.optimizer != "adamw") add("--optimizer", s.optimizer);
    if (s.momentum != 0) add("--momentum", s.momentum);
    if (s.lr_scaling != "none") add("--lr-scaling", s.lr_scaling);
    if (s.warmup_steps != 5) add("--warmup-steps", s.warmup_steps);
    if (s.warmup_style != "linear") add("--warmup-style", s.warmup_style);
    add("--data-seed", s.data_seed);
    if (s.samples > 0) add("--samples", s.samples);
    if (s.drop_last) a.push_back("--drop-last");
    if (s.checkpoint_every > 0) {
      add("--save-dir", run_dir + "/checkpoints");
      add("--save-every", s.checkpoint_every);
    }
    if (s.auto_resume) {
      add("--auto-resume", run_dir + "/checkpoints");
    } else if (!resume_from.empty()) {
      add("--resume", resume_from);
    }
    a.push_back("--checksum");
  }
  for (auto& p : s.plugins) add("--plugin", p);
  for (auto& f : s.fetch) add("--fetch", f);
  if (s.jit && !s.plugins.empty()) a.push_back("--plugin-jit");
  for (auto& x : s.extra_args) a.push_back(x);
  return a;
}

std::map<std::string, std::string> base_env() {
  std::map<std::string, std::string> m;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq);
    // A run's ranks get their identity and plans from the scenario only.
    if (k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "MASTER_ADDR" ||
        k == "MASTER_PORT" || k.rfind("FAULTLINE_", 0) == 0 || k.rfind("OMPI_COMM_WORLD", 0) == 0 ||
        k.rfind("PMIX_", 0) == 0 || k.rfind("OMPI_MCA_", 0) == 0) {
      if (k != "FAULTLINE_LOG_LEVEL" && k != "FAULTLINE_COMM_SPIN_US") continue;
    }
    m[k] = kv.substr(eq + 1);
  }
  return m;
}

pid_t spawn_logged(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw Error(fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  return pid;
}

}  // namespace fl::harness
