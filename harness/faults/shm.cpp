// shm: the run's ranks see a /dev/shm of their own, a tmpfs of `size` in the run's mount
// namespace, as a container's (Docker gives 64 MiB unless --shm-size says otherwise). What maps
// segments there and touches more than fits gets SIGBUS on the page that does not fit — the
// shared-memory transport's collectives (docs/comm.md) — rather than an error at creation.
// With topology.hosts each host's agent holds such a namespace on its host, and that host's ranks
// start inside it.
#include <map>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/faults/shm_mount.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/process/supervisor.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class ShmFault : public FaultOf<ShmFault> {
 public:
  int64_t bytes = 64 << 20;
  bool mounted = false;
  // topology.hosts: the hosts whose agents hold a mount namespace with the small /dev/shm, and
  // the pid holding each (what their ranks enter)
  std::map<int, pid_t> holders;

  nlohmann::json params() const override { return {{"size_bytes", bytes}}; }
  void setup(Host& h) override {
    if (!h.s.topo.hosts.empty()) return setup_on_hosts(h);
    // A fresh tmpfs over /dev/shm inside the run's private mount namespace: the host's /dev/shm
    // and everything in it stay as they were.
    run_tool(h.box.in_mount(shm_mount_argv(bytes)));
    mounted = true;
    h.record("shm", {{"path", kShmPath}, {"size_bytes", bytes}, {"via", "local"}}, -1,
             fmt::format("/dev/shm is a {}-byte tmpfs for the run", bytes));
  }

  // topology.hosts: the agent of `rank`'s host (of every host without a rank) makes a mount
  // namespace there with /dev/shm a tmpfs of `bytes`; that host's ranks start inside it (their
  // app-file line runs nsenter), the host's own /dev/shm stays as it is.
  void setup_on_hosts(Host& h) {
    for (const int node : fault_nodes(h, rank)) {
      const std::string host = node_name(h, node);
      auto& a = agent_for(h, node, "shm");
      HostFaultOp op{"shm_mount"};
      op.bytes = bytes;
      const auto r = a.host_fault(node, op);
      holders[node] = r.value("namespace_pid", 0);
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
    auto it = holders.find(host_of_rank(h.s, r));
    if (it == holders.end() || it->second <= 0) return;
    // Entering a mount namespace starts at its root: back to the rank's directory. nsenter's
    // options end at the first word that is not one (the worker's path).
    std::vector<std::string> pre = in_mount_of(it->second, {});
    pre.push_back(fmt::format("--wd={}/ranks/rank{}", h.dir, r));
    l.spec.argv.insert(l.spec.argv.begin(), pre.begin(), pre.end());
  }

  void heal(Host& h, bool) override {
    for (const auto& [node, pid] : holders) {
      const std::string host = node_name(h, node);
      try {
        auto& a = agent_for(h, node, "shm",
                            "its namespace went with it; the ranks' mount ends with them");
        const auto r = a.host_fault(node, {"shm_release"});
        nlohmann::json d = {{"fault", "shm"}, {"path", kShmPath}, {"via", "agent"}, {"host", host}};
        if (!r.value("unmounted", false)) d["error"] = r.value("error", "");
        h.hist.harness(r.value("unmounted", false) ? "fault_healed" : "heal_error", d);
      } catch (const std::exception& e) {
        try {
          h.hist.harness("heal_error", {{"fault", "shm"}, {"host", host}, {"error", e.what()}});
        } catch (...) {
        }
      }
    }
    holders.clear();
    if (!mounted) return;
    mounted = false;
    try {
      run_tool(h.box.in_mount(shm_umount_argv()));
      h.hist.harness("fault_healed", {{"fault", "shm"}, {"path", kShmPath}, {"via", "local"}});
    } catch (const std::exception& e) {
      try {
        h.hist.harness("heal_error", {{"fault", "shm"}, {"error", e.what()}});
      } catch (...) {
      }
    }
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
};

}  // namespace

const FaultKind& shm_kind() {
  static const ShmKind k;
  return k;
}

}  // namespace fl::harness::faults
