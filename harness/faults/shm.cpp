// shm: the run's ranks see a /dev/shm of their own, a tmpfs of `size` in the run's mount
// namespace, as a container's (Docker gives 64 MiB unless --shm-size says otherwise). What maps
// sparse segments there and touches more than fits gets SIGBUS on the page that does not fit —
// the shared-memory transport's collectives (docs/comm.md) — rather than an error at creation;
// what reserves its segments (FAULTLINE_SHM_ALLOCATE=reserve, as NCCL) fails at creation.
// The node of each target host mounts it (ShmMount, ShmRelease below): this machine in the run's
// mount namespace, which its ranks enter at spawn; another host's agent in a namespace it holds
// on its host, which that host's ranks enter through nsenter.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/faults/shm_mount.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/model/placement.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

// A child (`unshare --mount --propagation private sleep infinity`) holding a mount namespace of
// its own on this host; it dies with the thread that made it (parent-death signal).
pid_t hold_mount_namespace() {
  const std::string mine = fs::read_symlink("/proc/self/ns/mnt").string();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) raise<Error>("shm_mount: cannot fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the agent died before the signal was armed
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
    }
    const char* argv[] = {"unshare", "--mount",  "--propagation", "private",
                          "sleep",   "infinity", nullptr};
    ::execvp(argv[0], const_cast<char* const*>(argv));
    ::_exit(127);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::error_code ec;
    const auto theirs = fs::read_symlink(fmt::format("/proc/{}/ns/mnt", pid), ec);
    if (!ec && theirs.string() != mine) return pid;
    int status = 0;
    const bool ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (ended || std::chrono::steady_clock::now() > until) {
      if (!ended) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      raise<Error>(
          "shm_mount: no mount namespace of its own from `unshare --mount` ({}; it needs root or "
          "CAP_SYS_ADMIN on the host)",
          ended ? fmt::format("exit status {}", WEXITSTATUS(status)) : "not within 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// On a node: the process holding the mount namespace with the small /dev/shm (0: none).
struct ShmHolder : NodeState {
  Node& n;
  pid_t holder = 0;
  bool in_run = false;  // this machine: mounted in the run's mount namespace (Node::sandbox)
  explicit ShmHolder(Node& node) : n(node) {}
  std::vector<std::string> cleanup() override;
};

nlohmann::json shm_mount(Node& n, const pb::ShmMount& r) {
  auto& s = n.state<ShmHolder>();
  if (r.bytes() < 4096) {
    raise<Error>("shm_mount: {} bytes is below one page (4096 or more)", r.bytes());
  }
  if (s.holder != 0 || s.in_run) {
    raise<Error>("shm_mount: /dev/shm is sized on {} already", n.host());
  }
  if (Sandbox* box = n.sandbox()) {
    // A fresh tmpfs over /dev/shm inside the run's private mount namespace: the host's /dev/shm
    // and everything in it stay as they were.
    run_tool(box->in_mount(shm_mount_argv(r.bytes())));
    s.in_run = true;
    return {{"path", kShmPath}, {"size_bytes", r.bytes()}, {"host", n.host()}};
  }
  const pid_t holder = hold_mount_namespace();
  try {
    run_tool(in_mount_of(holder, shm_mount_argv(r.bytes())));
  } catch (...) {
    ::kill(holder, SIGKILL);
    ::waitpid(holder, nullptr, 0);
    throw;
  }
  s.holder = holder;
  return {{"path", kShmPath},
          {"size_bytes", r.bytes()},
          {"namespace_pid", holder},
          {"namespace", fs::read_symlink(fmt::format("/proc/{}/ns/mnt", holder)).string()},
          {"host", n.host()}};
}

// This machine: the tmpfs over the run's /dev/shm goes (with the namespace, once its holder ended).
nlohmann::json release_in_run(Node& n, ShmHolder& s) {
  s.in_run = false;
  Sandbox* box = n.sandbox();
  nlohmann::json d = {{"unmounted", true}, {"path", kShmPath}, {"host", n.host()}};
  try {
    if (box->has_mounts()) run_tool(box->in_mount(shm_umount_argv()));
  } catch (const std::exception& e) {
    d["unmounted"] = false;
    d["error"] = e.what();
  }
  return d;
}

nlohmann::json shm_release(Node& n, const pb::ShmRelease&) {
  auto& s = n.state<ShmHolder>();
  if (s.in_run) return release_in_run(n, s);
  if (s.holder == 0)
    raise<Error>("shm_release: no /dev/shm of this agent on {}; refused", n.host());
  const pid_t holder = s.holder;
  s.holder = 0;
  std::string error;
  try {
    run_tool(in_mount_of(holder, shm_umount_argv()));
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  nlohmann::json d = {{"unmounted", error.empty()}, {"path", kShmPath}, {"host", n.host()}};
  if (!error.empty()) d["error"] = error;
  return d;
}

std::vector<std::string> ShmHolder::cleanup() {
  if (holder == 0 && !in_run) return {};
  return {"shm_release " + shm_release(n, {}).dump()};
}

class ShmFault : public FaultOf<ShmFault> {
 public:
  int64_t bytes = 64 << 20;
  // the nodes that mounted it, and the pid holding each one's namespace (what its ranks enter;
  // 0 on this machine, whose ranks enter the run's mount namespace at spawn)
  std::map<int, pid_t> holders;

  nlohmann::json params() const override { return {{"size_bytes", bytes}}; }

  // The node of `rank`'s host (of every host without a rank; this machine without hosts) gives
  // the ranks there a /dev/shm of `bytes`; the host's own /dev/shm stays as it is.
  void setup(Host& h) override {
    for (const int node : nodes_of(h, rank)) {
      pb::ShmMount req;
      req.set_bytes(bytes);
      const auto r = on_node(h, node, req, "shm");
      holders[node] = r.value("namespace_pid", 0);
      if (in_process(h, node)) {
        h.record("shm", {{"path", kShmPath}, {"size_bytes", bytes}, {"via", "local"}}, -1,
                 fmt::format("/dev/shm is a {}-byte tmpfs for the run", bytes));
        continue;
      }
      const std::string host = node_name(h, node);
      h.record("shm",
               {{"path", kShmPath},
                {"size_bytes", bytes},
                {"via", "agent"},
                {"host", host},
                {"agent", r}},
               rank,
               fmt::format("/dev/shm is a {}-byte tmpfs for the run's ranks on {}", bytes, host));
    }
  }

  void adjust_rank(const Host& h, int r, Launch& l) const override {
    auto it = holders.find(host_of_rank(h.s.topo, r));
    if (it == holders.end() || it->second <= 0) return;
    // Entering a mount namespace starts at its root: back to the rank's directory. nsenter's
    // options end at the first word that is not one (the worker's path).
    std::vector<std::string> pre = in_mount_of(it->second, {});
    pre.push_back(fmt::format("--wd={}/ranks/rank{}", h.dir, r));
    l.spec.argv.insert(l.spec.argv.begin(), pre.begin(), pre.end());
  }

  void heal(Host& h, bool) override {
    for (const auto& [node, pid] : holders) {
      const bool local = in_process(h, node);
      nlohmann::json d = {{"fault", "shm"}};
      if (!local) d["host"] = node_name(h, node);
      try {
        const auto r = on_node(h, node, pb::ShmRelease(), "shm",
                               "its namespace went with it; the ranks' mount ends with them");
        const bool ok = r.value("unmounted", false);
        if (ok || !local) d.update({{"path", kShmPath}, {"via", local ? "local" : "agent"}});
        if (!ok) d["error"] = r.value("error", "");
        h.hist.harness(ok ? "fault_healed" : "heal_error", d);
      } catch (const std::exception& e) {
        try {
          d["error"] = e.what();
          h.hist.harness("heal_error", d);
        } catch (...) {
        }
      }
    }
    holders.clear();
  }
};

class ShmKind : public FaultKind {
 public:
  std::string key() const override { return "shm"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].shm", KeyType::kSection, "",
             "The ranks' /dev/shm is a tmpfs of its own (a container's; needs root)"},
            {"faults[].shm.size", KeyType::kString, "64m",
             "Its size (bytes; k, m, g suffixes; Docker's default is 64m)"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<ShmFault>();
    const auto n = item["shm"];
    if (slurm_places_ranks(c.s)) {
      loader::fail_at(c.file, n, c.at + ".shm",
                      needs_rank_node("shm",
                                      "each rank's command must enter the mount namespace "
                                      "its node's agent holds (nsenter with that "
                                      "agent's pid) before it starts"));
    }
    if (n["size"]) f->bytes = loader::parse_size(c.file, n["size"], c.at + ".shm.size");
    if (f->bytes < 4096) {
      loader::fail_at(c.file, n["size"], c.at + ".shm.size",
                      fmt::format("{} bytes is below one page (allowed: 4k or more)", f->bytes));
    }
    return f;
  }
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::ShmMount> mount(&shm_mount);
    static const NodeHandlerOf<pb::ShmRelease> release(&shm_release);
    return {&mount, &release};
  }
};

}  // namespace

const FaultKind& shm_kind() {
  static const ShmKind k;
  return k;
}

}  // namespace fl::harness::faults
