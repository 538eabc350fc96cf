// The per-host agents of a run over topology.hosts (harness/agent/hub.hpp), or of a run with
// launcher srun (one per node, run_agents_srun.cpp): started once the supervisor exists and
// before any fault is set up or rank launched; a lost agent ends the run.
// Each host's ranks stream their telemetry to their agent, which relays it (agent/relay.hpp).
#include <filesystem>

#include "harness/agent/relay.hpp"
#include "harness/run/run.hpp"

namespace fl::harness::detail {

std::function<bool()> Run::agent_poll() {
  return [this] {
    if (stopping_) return false;  // interrupted while the agents start
    // An agent that ended before the ranks exist looks like the last rank's end to on_exit,
    // which stops the loop: the others must still be heard.
    io_.restart();
    io_.poll();
    return true;
  };
}

std::function<void(const std::string&)> Run::agent_lost_handler() {
  return [this](const std::string& why) {
    // On a gRPC thread: the run ends on its own thread; go() reports the loss as its error.
    boost::asio::post(io_, [this, why] {
      if (stopping_) return;
      stopping_ = true;
      stop_reason_ = why;
      io_.stop();
    });
  };
}

void Run::start_agents() {
  if (!agents_) return;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  if (slurm_) {
    start_srun_agents(exe);
  } else {
    agents_->start(*sup_, exe, ctl_addr_, agent_poll(), agent_lost_handler(),
                   o_.allow_shared_results);
  }
  faults_->use_agents(agents_.get());
  if (!relaying_) return;  // launcher srun's agents do not relay (rank_control_addr)
  nlohmann::json via = nlohmann::json::object();
  for (size_t k = 0; k < s_.topo.hosts.size(); ++k) {
    const std::string a = agents_->relay_addr(static_cast<int>(k));
    via[s_.topo.hosts[k]] = a.empty() ? ctl_addr_ : a;
  }
  hist_->harness("telemetry_relay", {{"on", kAgentRelay.get()}, {"ranks_send_to", via}});
}

// Relayed batches are ingested as the control plane ingests a rank's own; commands for ranks that
// stream through an agent go back through it.
void Run::relay_through_agents() {
  relaying_ = true;
  agents_->relay_to([this](const faultline::v1::EventBatch& b) { ctl_->ingest(b); });
  ctl_->relay_commands([this](int rank, const faultline::v1::WorkerCommand& c) {
    return agents_->command_ranks(rank, c);
  });
}

std::string Run::rank_control_addr(int node) const {
  // Only where the relay is wired (topology.hosts; launcher srun's agents do not relay).
  if (!relaying_) return ctl_addr_;
  const std::string a = agents_->relay_addr(node);
  return a.empty() ? ctl_addr_ : a;
}

}  // namespace fl::harness::detail
