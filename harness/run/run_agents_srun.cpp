// `launcher: srun`: the allocation is checked before anything starts (slurm_alloc.hpp), and the
// run's agents come up as one job step of their own, one task per node (srun --overlap, so the
// ranks' step still gets every CPU): `faultline agent` registers as the node's logical host
// (topology.hosts, mapped onto the allocation's nodes in order) or, without hosts, as the node.
// The step ends when the agents are told to stop, and with the teardown on every failure path.
// The same step starts the agents of a run with launcher mpirun over topology.hosts inside an
// allocation whose nodes the hosts are: no host is reached through ssh (mpirun itself starts its
// daemons through Slurm there), and the ranks' telemetry is relayed as over any hosts.
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/private_dir.hpp"
#include "harness/agent/hub.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/slurm_alloc.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/run_agents.hpp"
#include "harness/run/runner.hpp"

extern "C" char** environ;

namespace fl::harness {

void RunAgents::check_allocation() {
  srun_launcher_ = true;
  slurm_ = std::make_unique<SlurmAllocation>(check_srun_allocation(s_));
  nlohmann::json d = {{"job", slurm_->job}, {"nodes", slurm_->nodes}};
  if (!slurm_->hosts.empty()) d["hosts"] = slurm_->mapping();
  hist_.harness("slurm_allocation", d);
}

bool RunAgents::use_allocation() {
  auto a = mpirun_allocation(s_);
  if (!a) return false;
  slurm_ = std::make_unique<SlurmAllocation>(std::move(*a));
  hist_.harness("slurm_allocation", {{"job", slurm_->job},
                                     {"nodes", slurm_->nodes},
                                     {"hosts", slurm_->mapping()},
                                     {"agents_via", "srun"}});
  return true;
}

void RunAgents::start_srun(Supervisor& sup, const std::string& exe,
                           const std::string& control_addr) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto names = slurm_->agent_names();
  const auto nodes = slurm_->agent_nodes();
  // Task k on nodes[k] (srun's arbitrary distribution reads SLURM_HOSTFILE), running the agent
  // named names[k]; the words are checked as for the rsh agent (plain paths and names).
  std::string prog, hostfile;
  for (size_t k = 0; k < names.size(); ++k) {
    prog +=
        fmt::format("{} {}{}\n", k, fmt::join(agent_words(names[k], exe, control_addr, dir_), " "),
                    o_.allow_shared_results ? " --allow-shared-results" : "");
    hostfile += nodes[k] + "\n";
  }
  run_dir_.write_atomic("agents.multiprog", prog);
  run_dir_.write_atomic("agents.hosts", hostfile);
  ProcessSpec p;
  p.name = "agents";
  p.argv = {"srun",
            "--overlap",
            "--ntasks=" + std::to_string(names.size()),
            "--ntasks-per-node=1",
            "--distribution=arbitrary",
            "--kill-on-bad-exit=0",
            "--job-name=faultline-agents",
            "--multi-prog",
            dir_ + "/agents.multiprog"};
  p.cwd = dir_;
  for (char** e = environ; *e != nullptr; ++e) p.env.push_back(*e);  // no secret in it
  p.env.push_back("SLURM_HOSTFILE=" + dir_ + "/agents.hosts");
  const pid_t step = sup.spawn(p);
  hist_.harness("agents_step",
                {{"pid", step}, {"argv", p.argv}, {"hosts", names}, {"nodes", nodes}});
  hub_->wait_attached([&sup, step](size_t) { return sup.is_running(step); }, control_addr, poll(),
                      lost_handler(), t0);
}

}  // namespace fl::harness
