// fl-ds-runner: the `deepspeed` launcher's job process, DeepSpeed's runner and launch.py in one
// (ds_runner.hpp has their resource logic). It reads the hostfile, applies --include/--exclude,
// --num_nodes, --num_gpus and its own CUDA_VISIBLE_DEVICES as runner.main does, prints what the
// runner prints, and then starts one process per chosen slot with launch.py's variables: RANK,
// LOCAL_RANK (= RANK % the node's process count), WORLD_SIZE, LOCAL_SIZE, CROSS_RANK/CROSS_SIZE and
// CUDA_VISIBLE_DEVICES = the node's slot ids. The project's names ride along (NODE_RANK,
// LOCAL_WORLD_SIZE, FAULTLINE_DEVICES_PER_NODE = the host's slots=), so a rank's device comes from
// the CPU device model as a GPU's would from the CUDA runtime. Every "host" runs on this machine.
//
// A runner error prints Python's last traceback line (`ValueError: Hostfile contains a bad entry:
// ...`) and exits 1 before anything starts. When a rank fails the others are killed and the
// runner exits with its status, as launch.py's sigkill_handler does.
//
// usage: fl-ds-runner --ranks FILE [--hostfile PATH] [--include S] [--exclude S] [--num_nodes N]
//                     [--num_gpus N] [--device-count N] [--devices-per-node N]
//                     [--version X.Y.Z|latest] -- PROGRAM [ARGS...]
// --device-count: the devices this machine has (what the runner counts without a hostfile, under
// its CUDA_VISIBLE_DEVICES); --devices-per-node: each node's (0: a hostfile host's slots).
// FILE: one JSON object a line per rank the harness knows, {"cwd": DIR, "env": {VAR: value}}.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/device_list.hpp"
#include "harness/launch/ds_runner.hpp"

extern "C" char** environ;

namespace {

namespace ds = fl::harness::ds;

volatile sig_atomic_t g_stop = 0;
void on_signal(int sig) {
  g_stop = sig;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "fl-ds-runner: %s\n", why.c_str());
  std::exit(2);
}

struct Options {
  std::string ranks_file, hostfile, include, exclude;
  std::string version = "latest";
  int num_nodes = -1, num_gpus = -1, device_count = 0, devices_per_node = 0;
  std::vector<std::string> program;
};

Options parse_options(int argc, char** argv) {
  Options o;
  int i = 1;
  auto value = [&](const char* name) -> std::string {
    if (i + 1 >= argc) usage(std::string(name) + " needs a value");
    return argv[++i];
  };
  auto number = [&](const char* name) {
    const std::string v = value(name);
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') usage(std::string(name) + " '" + v + "' is not an integer");
    return static_cast<int>(n);
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) o.program.emplace_back(argv[i]);
      break;
    }
    if (a == "--ranks")
      o.ranks_file = value("--ranks");
    else if (a == "--hostfile")
      o.hostfile = value("--hostfile");
    else if (a == "--include")
      o.include = value("--include");
    else if (a == "--exclude")
      o.exclude = value("--exclude");
    else if (a == "--num_nodes")
      o.num_nodes = number("--num_nodes");
    else if (a == "--num_gpus")
      o.num_gpus = number("--num_gpus");
    else if (a == "--device-count")
      o.device_count = number("--device-count");
    else if (a == "--devices-per-node")
      o.devices_per_node = number("--devices-per-node");
    else if (a == "--version")
      o.version = value("--version");
    else
      usage("unknown option " + a);
  }
  if (o.ranks_file.empty() || o.program.empty()) usage("--ranks FILE and -- PROGRAM are required");
  return o;
}

// fetch_hostfile: a missing file is a warning, and the run goes on with local resources.
ds::RunnerArgs runner_args(const Options& o) {
  ds::RunnerArgs a;
  a.include = o.include;
  a.exclude = o.exclude;
  a.num_nodes = o.num_nodes;
  a.num_gpus = o.num_gpus;
  a.device_count = o.device_count;
  a.version = o.version;
  // What torch.cuda.device_count() finds under the runner's own CUDA_VISIBLE_DEVICES.
  a.visible_count = [&o](const std::string& list) {
    return static_cast<int>(fl::comm::parse_visible_devices(list, 0, o.device_count).size());
  };
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) a.visible_devices = v;
  if (!o.hostfile.empty()) {
    std::ifstream in(o.hostfile);
    if (!in) {
      std::printf(
          "[WARNING] [runner.py] Unable to find hostfile, will proceed with training "
          "with local resources only.\n");
    } else {
      a.has_hostfile = true;
      for (std::string line; std::getline(in, line);) a.hostfile.push_back(line);
    }
  }
  return a;
}

std::vector<nlohmann::json> read_ranks(const std::string& path) {
  std::ifstream in(path);
  if (!in) usage("cannot read " + path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  if (out.empty()) usage(path + " lists no rank");
  return out;
}

// One slot's process: the runner's environment, the harness's variables for that rank, and
// launch.py's on top (they win, as launch.py's current_env does).
pid_t spawn(const Options& o, const ds::SlotProcess& p, int node_devices,
            const nlohmann::json& rank) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const nlohmann::json vars = rank.value("env", nlohmann::json::object());  // outlives items()
  for (const auto& [k, v] : vars.items()) {
    env[k] = v.get<std::string>();
  }
  env["CUDA_VISIBLE_DEVICES"] = p.visible_devices;
  env["WORLD_SIZE"] = std::to_string(p.world_size);
  env["CROSS_RANK"] = env["NODE_RANK"] = std::to_string(p.node_rank);
  env["CROSS_SIZE"] = std::to_string(p.nnodes);
  env["LOCAL_SIZE"] = env["LOCAL_WORLD_SIZE"] = std::to_string(p.local_size);
  env["RANK"] = std::to_string(p.rank);
  env["LOCAL_RANK"] = std::to_string(p.local_rank);
  env["FAULTLINE_DEVICES_PER_NODE"] = std::to_string(node_devices);
  std::vector<std::string> flat;
  for (const auto& [k, v] : env) flat.push_back(k + "=" + v);
  const std::string cwd = rank.value("cwd", std::string("."));
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  std::vector<char*> argv, envp;
  for (const auto& a : o.program) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& kv : flat) envp.push_back(kv.data());
  envp.push_back(nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // no rank outlives its runner
  if (::chdir(cwd.c_str()) != 0) {
    std::fprintf(stderr, "fl-ds-runner: chdir %s: %s\n", cwd.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::execve(argv[0], argv.data(), envp.data());
  std::fprintf(stderr, "fl-ds-runner: exec %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

void kill_all(const std::map<pid_t, int>& running) {
  for (const auto& [pid, rank] : running) ::kill(pid, SIGKILL);
}

// launch.py's loop: wait for every process; the first that fails ends the others.
int supervise(std::map<pid_t, int> running) {
  int status_out = 0;
  while (!running.empty()) {
    if (g_stop != 0) {
      kill_all(running);
      g_stop = 0;
      status_out = 128 + SIGTERM;
    }
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    const int rank = it->second;
    running.erase(it);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    if (code != 0 && status_out == 0) {
      std::printf("[ERROR] [launch.py] Process %d exits with return code = %d\n",
                  static_cast<int>(pid), code);
      std::printf("[INFO] [launch.py] Killing subprocess %d (rank %d failed)\n",
                  static_cast<int>(pid), rank);
      std::fflush(stdout);
      kill_all(running);
      status_out = code > 0 ? code : 1;
    }
  }
  return status_out;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  std::vector<ds::SlotProcess> layout;
  ds::RunnerWorld world;
  std::vector<std::string> printed;
  ds::RunnerArgs args;
  try {
    args = runner_args(o);
    world = ds::resolve_world(args, printed);
    for (const auto& line : printed) std::printf("%s\n", line.c_str());
    layout = ds::launch_layout(world);
  } catch (const ds::RunnerError& e) {
    for (const auto& line : printed) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    std::fprintf(stderr,
                 "Traceback (most recent call last):\n  File \"deepspeed/launcher/runner.py\""
                 ", in main\n%s: %s\n",
                 e.type.c_str(), e.what());
    return 1;
  }
  std::printf("[INFO] [runner.py] cmd = python -u -m deepspeed.launcher.launch --world_info=%s\n",
              ds::encode_world_info(world.active).c_str());
  std::fflush(stdout);
  const auto ranks = read_ranks(o.ranks_file);
  std::map<pid_t, int> running;
  for (const auto& p : layout) {
    const nlohmann::json& r =
        p.rank < static_cast<int>(ranks.size()) ? ranks[static_cast<size_t>(p.rank)] : ranks.back();
    // The node's devices: as given, else a hostfile host's slots, else this machine's count.
    const int node_devices = o.devices_per_node > 0 ? o.devices_per_node
                             : args.has_hostfile    ? p.node_devices
                                                    : o.device_count;
    running[spawn(o, p, node_devices, r)] = p.rank;
  }
  return supervise(running);
}
