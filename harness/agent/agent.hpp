// `faultline agent`: the per-host agent of a multi-host run (docs/cluster.md). The harness starts
// one on every host of topology.hosts through the rsh agent; it attaches to the run's control
// plane with the run's secret (RUN_DIR/control.secret on the shared filesystem, or
// FAULTLINE_CONTROL_SECRET), registers, and then does what the harness asks on its host: runs a
// network tool (iptables, tc, ip; never a shell), signals one of the run's ranks (after checking
// that the pid is that rank of this run), and reports each result. It ends when the harness says
// stop or its connection ends; in the second case it first runs the clean-ups the harness left
// with it (removing the run's iptables chain), so a lost harness leaves nothing on the host.
#pragma once

#include <string>

namespace fl::harness {

struct AgentOptions {
  std::string control;  // the control plane's address (unix:PATH or HOST:PORT)
  std::string host;     // this host's name as topology.hosts lists it
  std::string run_dir;  // the run directory (shared filesystem)
  // Accept a run directory under one that another user can write (else the agent refuses to start:
  // base/private_dir.hpp).
  bool allow_shared_results = false;
};

// Returns the process's exit status: 0 when stopped by the harness, 3 when the connection was
// lost, 2 when it could not attach.
int run_agent(const AgentOptions& o);

}  // namespace fl::harness
