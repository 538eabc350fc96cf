// `launcher: srun`: the allocation is checked before anything starts (slurm_alloc.hpp), and the
// run's agents come up as one job step of their own, one task per node (srun --overlap, so the
// ranks' step still gets every CPU): `faultline agent` registers as the node's logical host
// (topology.hosts, mapped onto the allocation's nodes in order) or, without hosts, as the node.
// The step ends when the agents are told to stop, and with the teardown on every failure path.
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/run/run.hpp"

extern "C" char** environ;

namespace fl::harness::detail {

void Run::check_allocation() {
  slurm_ = check_srun_allocation(s_);
  nlohmann::json d = {{"job", slurm_->job}, {"nodes", slurm_->nodes}};
  if (!slurm_->hosts.empty()) d["hosts"] = slurm_->mapping();
  hist_->harness("slurm_allocation", d);
}

void Run::start_srun_agents(const std::string& exe) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto names = slurm_->agent_names();
  const auto nodes = slurm_->agent_nodes();
  // Task k on nodes[k] (srun's arbitrary distribution reads SLURM_HOSTFILE), running the agent
  // named names[k]; the words are checked as for the rsh agent (plain paths and names).
  std::string prog, hostfile;
  for (size_t k = 0; k < names.size(); ++k) {
    prog += fmt::format("{} {}{}\n", k, fmt::join(agent_words(names[k], exe, ctl_addr_, dir_), " "),
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
  const pid_t step = sup_->spawn(p);
  hist_->harness("agents_step",
                 {{"pid", step}, {"argv", p.argv}, {"hosts", names}, {"nodes", nodes}});
  agents_->wait_attached([this, step](size_t) { return sup_->is_running(step); }, ctl_addr_,
                         agent_poll(), agent_lost_handler(), t0);
}

}  // namespace fl::harness::detail
