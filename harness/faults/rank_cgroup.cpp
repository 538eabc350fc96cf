#include "harness/faults/rank_cgroup.hpp"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/control_auth.hpp"

namespace fl::harness::faults {

namespace fs = std::filesystem;

namespace {

// How long ago `pid` started (ms; -1 when unknown): /proc/PID/stat's start time against uptime.
double age_ms(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && rest >> field;) ++i;  // fields 3..21, then 22 is the start time
  double start_ticks = 0, uptime_s = 0;
  if (!(rest >> start_ticks)) return -1;
  std::ifstream("/proc/uptime") >> uptime_s;
  return (uptime_s - start_ticks / static_cast<double>(::sysconf(_SC_CLK_TCK))) * 1000.0;
}

}  // namespace

bool RankCgroup::is_rank(pid_t pid) const {
  std::error_code ec;
  if (fs::read_symlink(fmt::format("/proc/{}/cwd", pid), ec).string() != rank_dir) return false;
  std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  bool other_secret = false, has_rank = false;
  const std::string var = fmt::format("{}=", kControlSecretEnv);
  const std::string ours = fmt::format("{}={}", kControlSecretEnv, secret);
  for (std::string kv; std::getline(env, kv, '\0');) {
    other_secret |= kv.rfind(var, 0) == 0 && kv != ours;
    has_rank |= kv == fmt::format("RANK={}", rank);
  }
  return has_rank && !other_secret;
}

bool RankCgroup::adopt_new() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    const pid_t pid = std::atoi(name.c_str());
    {
      std::lock_guard lock(mu);
      if (adopted.count(pid)) continue;
    }
    if (!is_rank(pid)) continue;
    const std::string from = cgroup_of(pid, controller, cg->version());
    try {
      cg->write("cgroup.procs", std::to_string(pid));
      std::lock_guard lock(mu);
      adopted[pid] = from;
      adopted_ms.push_back(age_ms(pid));
    } catch (const std::exception& x) {
      std::lock_guard lock(mu);
      if (errors.size() < 8) errors.push_back(x.what());
    }
  }
  std::lock_guard lock(mu);
  return !adopted.empty();
}

void RankCgroup::place() {
  if (node->place_at_spawn(rank, cg->procs())) {
    at_spawn = true;
    origin = cgroup_of(::getpid(), controller, cg->version());
    return;
  }
  start();
}

void RankCgroup::start() {
  watcher = std::thread([this] {
    while (!stop) {
      const bool any = adopt_new();
      // Quickly until the rank appears (it allocates from its first instructions on), then
      // seldom (a restarted rank is a new process).
      for (int i = 0; i < (any ? 10 : 1) && !stop; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
}

nlohmann::json RankCgroup::counters() {
  std::vector<pid_t> pids, alive;
  std::vector<double> after_ms;
  std::vector<std::string> errs;
  {
    // The watcher appends to these under the lock while it adopts a rank.
    std::lock_guard lock(mu);
    for (const auto& [pid, from] : adopted) {
      pids.push_back(pid);
      if (fs::exists(fmt::format("/proc/{}", pid)) && is_rank(pid)) alive.push_back(pid);
    }
    after_ms = adopted_ms;
    errs = errors;
  }
  nlohmann::json r = {{"cgroup", cg->path()}, {"placed", at_spawn ? "at_spawn" : "moved_in"},
                      {"pids", pids},         {"adopted_after_ms", after_ms},
                      {"alive", alive},       {"errors", errs}};
  if (controller == "cpu") {
    r.update(cpu_stat(*cg));
    return r;
  }
  r["limit"] = bytes;
  r.update(memory_counters(*cg));
  return r;
}

nlohmann::json RankCgroup::release() {
  if (at_spawn) node->unplace(rank, cg->procs());  // a rank started from now on stays out
  stop = true;
  if (watcher.joinable()) watcher.join();
  // Counters that cannot be read are reported, but never keep the group (and the rank's
  // processes) in place: the moves back and the removal below always run.
  nlohmann::json r;
  try {
    r = counters();
  } catch (const std::exception& x) {
    r = {{"cgroup", cg->path()}, {"error", fmt::format("cannot read its counters: {}", x.what())}};
  }
  int moved = 0;
  std::map<pid_t, std::string> from;
  {
    std::lock_guard lock(mu);
    from = adopted;
  }
  std::istringstream left(cg->read("cgroup.procs"));
  for (pid_t pid = 0; left >> pid;) {
    std::string back = root;
    // A child of a rank came with it: back to where the rank was (at spawn: the harness's group).
    const auto it = from.find(pid);
    const std::string rel = it != from.end() ? it->second
                            : from.empty()   ? origin
                                             : from.begin()->second;
    if (!rel.empty() && rel != "/" && fs::exists(root + rel + "/cgroup.procs")) back += rel;
    std::ofstream out(back + "/cgroup.procs");
    out << pid;
    out.flush();
    if (out) ++moved;
  }
  r["moved_back"] = moved;
  r["removed"] = cg->remove();
  return r;
}

RankCgroup::~RankCgroup() {
  if (at_spawn && cg) node->unplace(rank, cg->procs());  // gone without a release: spawn outside
  stop = true;
  if (watcher.joinable()) watcher.join();
}

std::unique_ptr<RankCgroup> RankCgroup::make(const std::string& controller, int rank, Node& n,
                                             const std::function<void(Cgroup&)>& limit) {
  const bool memory = controller == "memory";
  const std::string root = memory ? memory_cgroup_root() : cpu_cgroup_root();
  auto g = std::make_unique<RankCgroup>();
  g->swept = sweep_stale_cgroups(root);
  g->controller = controller;
  g->rank = rank;
  g->root = root;
  g->secret = n.secret();
  g->node = &n;
  std::error_code ec;
  g->rank_dir =
      fs::weakly_canonical(fmt::format("{}/ranks/rank{}", n.run_dir(), rank), ec).string();
  g->cg.emplace(root, memory ? "FAULTLINE_CGROUP_ROOT" : "FAULTLINE_CPU_CGROUP_ROOT", n.run_dir(),
                rank, (memory ? "memory_limit on " : "cpu_quota on ") + n.host(), controller);
  try {
    limit(*g->cg);
  } catch (...) {
    g->cg->remove();
    throw;
  }
  return g;
}

}  // namespace fl::harness::faults
