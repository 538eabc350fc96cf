// The per-host agents of a run over topology.hosts (harness/agent/hub.hpp): started once the
// supervisor exists and before any fault is set up or rank launched; a lost agent ends the run.
#include <filesystem>

#include "harness/run/run.hpp"

namespace fl::harness::detail {

void Run::start_agents() {
  if (!agents_) return;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  agents_->start(
      *sup_, exe, ctl_addr_,
      [this] {
        if (stopping_) return false;  // interrupted while the agents start
        // An agent that ended before the ranks exist looks like the last rank's end to on_exit,
        // which stops the loop: the others must still be heard.
        io_.restart();
        io_.poll();
        return true;
      },
      [this](const std::string& why) {
        // On a gRPC thread: the run ends on its own thread; go() reports the loss as its error.
        boost::asio::post(io_, [this, why] {
          if (stopping_) return;
          stopping_ = true;
          stop_reason_ = why;
          io_.stop();
        });
      });
  faults_->use_agents(agents_.get());
}

}  // namespace fl::harness::detail
