// launcher: `rank`'s (or every rank's) process is a per-node launcher, fl-launch
// (harness/launch/fl_launch.cpp), that starts the worker. `starts: one` is a correct wrapper
// (it starts this rank only); `starts: node` is a launcher started inside another launcher
// (deepspeed under torchrun or mpirun, or one started on every node instead of once): every copy
// starts all of its node's ranks again, so the node has several rank 0s binding MASTER_PORT and
// every rank is claimed by several processes. `devices: int` makes it read CUDA_VISIBLE_DEVICES
// with int() as DeepSpeed's runner did.
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/model/placement.hpp"
#include "harness/process/supervisor.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class LauncherFault : public FaultOf<LauncherFault> {
 public:
  std::string starts = "one";
  std::string devices = "cuda";
  int per_node = 1;

  nlohmann::json params() const override {
    return {{"starts", starts}, {"devices", devices}, {"processes_per_launch", nproc()}};
  }
  int nproc() const { return starts == "node" ? per_node : 1; }
  void setup(Host& h) override {
    h.record("launcher",
             {{"starts", starts}, {"devices", devices}, {"processes_per_launch", nproc()}}, rank,
             starts == "node"
                 ? fmt::format("{} runs a launcher that starts all {} ranks of its node again",
                               rank < 0 ? std::string("every rank") : fmt::format("rank {}", rank),
                               per_node)
                 : fmt::format("{} started through fl-launch (devices read as {})",
                               rank < 0 ? std::string("every rank") : fmt::format("rank {}", rank),
                               devices));
  }
  void adjust_rank(const Host& h, int r, Launch& l) const override {
    if (rank >= 0 && rank != r) return;
    const int base = starts == "node" ? node_of_rank(h.s.topo, r) * per_node : r;
    std::vector<std::string> argv = {this_build::launch_bin(),
                                     "--nproc",
                                     std::to_string(nproc()),
                                     "--rank-base",
                                     std::to_string(base),
                                     "--devices",
                                     devices,
                                     "--"};
    argv.insert(argv.end(), l.spec.argv.begin(), l.spec.argv.end());
    l.spec.argv = std::move(argv);
  }
};

class LauncherKind : public FaultKind {
 public:
  std::string key() const override { return "launcher"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].launcher", KeyType::kSection, "",
             "Start `rank` (or every rank) through fl-launch, a per-node launcher in the style "
             "of DeepSpeed's"},
            {"faults[].launcher.starts",
             KeyType::kEnum,
             "one",
             "one (it starts just this rank: a correct wrapper) or node (it starts every rank of "
             "the node again: a launcher inside a launcher, several rank 0s on MASTER_PORT)",
             {"one", "node"}},
            {"faults[].launcher.devices",
             KeyType::kEnum,
             "cuda",
             "How it reads CUDA_VISIBLE_DEVICES: int (every entry through int(), as DeepSpeed's "
             "runner did: a GPU-/MIG- UUID fails) or cuda (indices and UUIDs, as the CUDA runtime)",
             {"int", "cuda"}}};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<LauncherFault>();
    const auto n = item["launcher"];
    f->starts = loader::opt<std::string>(n, "starts", "one");
    f->devices = loader::opt<std::string>(n, "devices", "cuda");
    f->per_node = ranks_per_node(c.s.topo.ranks, c.s.topo.nodes);
    if (c.s.topo.launcher == "deepspeed") {
      // DeepSpeed's launch.py starts every process of a node with one command; fl-launch's
      // (--rank-base) would differ from rank to rank.
      loader::fail_at(c.file, n, c.at + ".launcher",
                      "a per-node launcher fault needs topology.launcher: local, mpirun or srun "
                      "(under the deepspeed launcher DeepSpeed's runner starts every rank with one "
                      "command)");
    }
    if (f->starts == "node" && c.s.topo.launcher != "local") {
      // Under mpirun every child would take the MPI identity of the process that started it.
      loader::fail_at(c.file, n["starts"], c.at + ".launcher.starts",
                      "starts: node needs topology.launcher: local (under mpirun the extra "
                      "processes would share their launcher's MPI rank)");
    }
    return f;
  }
};

}  // namespace

const FaultKind& launcher_kind() {
  static const LauncherKind k;
  return k;
}

}  // namespace fl::harness::faults
