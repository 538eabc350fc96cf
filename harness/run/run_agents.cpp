// The per-host agents of a run over topology.hosts (run_agents.hpp); launcher srun's in
// run_agents_srun.cpp.
#include "harness/run/run_agents.hpp"

#include <filesystem>

#include "base/private_dir.hpp"
#include "harness/agent/hub.hpp"
#include "harness/agent/relay.hpp"
#include "harness/control/controller.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/slurm_alloc.hpp"
#include "harness/run/event_loop.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness {

RunAgents::RunAgents(const Scenario& s, const RunOptions& o, const std::string& dir,
                     const DirFd& run_dir, History& hist, EventLoop& loop,
                     std::function<bool()> stopping,
                     std::function<void(const std::string&)> stop_run)
    : s_(s),
      o_(o),
      dir_(dir),
      run_dir_(run_dir),
      hist_(hist),
      loop_(loop),
      stopping_(std::move(stopping)),
      stop_run_(std::move(stop_run)) {}

RunAgents::~RunAgents() = default;

std::function<bool()> RunAgents::poll() {
  return [this] {
    if (stopping_()) return false;  // interrupted while the agents start
    // An agent that ended before the ranks exist looks like the last rank's end to on_exit,
    // which stops the loop: the others must still be heard.
    loop_.restart();
    loop_.poll();
    return true;
  };
}

std::function<void(const std::string&)> RunAgents::lost_handler() {
  return [this](const std::string& why) {
    // On a gRPC thread: the run ends on its own thread; go() reports the loss as its error.
    loop_.post([this, why] { stop_run_(why); });
  };
}

// Relayed batches are ingested as the control plane ingests a rank's own; commands for ranks that
// stream through an agent go back through it.
void RunAgents::attach(Controller& ctl, const std::string& secret) {
  if (slurm_ && srun_launcher_) {  // launcher srun: an agent on every node the run uses
    hub_ = std::make_unique<AgentHub>(s_, slurm_->agent_names(), dir_, hist_, secret);
    ctl.add_service(hub_->service());
    return;
  }
  if (s_.topo.hosts.empty()) return;
  hub_ = std::make_unique<AgentHub>(s_, dir_, hist_, secret);
  ctl.add_service(hub_->service());
  relaying_ = true;
  hub_->relay_to([&ctl](const faultline::v1::EventBatch& b) { ctl.ingest(b); });
  ctl.relay_commands([this](int rank, const faultline::v1::WorkerCommand& c) {
    return hub_->command_ranks(rank, c);
  });
}

void RunAgents::start(Supervisor& sup, OutOfProcessFaults& faults,
                      const std::string& control_addr) {
  if (!hub_) return;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  if (slurm_) {
    start_srun(sup, exe, control_addr);
  } else {
    hub_->start(sup, exe, control_addr, poll(), lost_handler(), o_.allow_shared_results);
  }
  faults.use_agents(hub_.get());
  if (!relaying_) return;  // launcher srun's agents do not relay (rank_control_addr)
  nlohmann::json via = nlohmann::json::object();
  for (size_t k = 0; k < s_.topo.hosts.size(); ++k) {
    const std::string a = hub_->relay_addr(static_cast<int>(k));
    via[s_.topo.hosts[k]] = a.empty() ? control_addr : a;
  }
  hist_.harness("telemetry_relay", {{"on", kAgentRelay.get()}, {"ranks_send_to", via}});
}

std::string RunAgents::rank_control_addr(int node, const std::string& control_addr) const {
  // Only where the relay is wired (topology.hosts; launcher srun's agents do not relay).
  if (!relaying_) return control_addr;
  const std::string a = hub_->relay_addr(node);
  return a.empty() ? control_addr : a;
}

std::string RunAgents::lost() const {
  return hub_ ? hub_->lost() : "";
}

void RunAgents::stop() {
  if (hub_) hub_->stop();
}

}  // namespace fl::harness
