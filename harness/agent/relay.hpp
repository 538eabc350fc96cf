// The agent's side of the telemetry relay and its heartbeat (docs/cluster.md, "Telemetry through
// the agent"). The relay serves the same Controller.Connect the ranks already speak, on a unix
// socket of its host in the run directory (RUN_DIR/agents/HOST.sock, 0600; when that path is too
// long, relay.sock in a private 0700 directory /tmp/faultline-relay-XXXXXX, removed at stop),
// checks the run's secret before it reads anything, and forwards every batch of a rank, as it came,
// on the agent's own Attach stream; the harness ingests it as if it had come straight. Commands for
// a rank (arm_faults, clear_faults) come back the same way. A batch that cannot be forwarded ends
// the rank's stream: the rank keeps everything in its own events.jsonl, which the harness merges at
// the end of the run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/settings.hpp"

namespace faultline::v1 {
class AgentReport;
class WorkerCommand;
}  // namespace faultline::v1

namespace fl::harness {

FAULTLINE_SETTING(kAgentRelay, bool, "FAULTLINE_AGENT_RELAY", true,
                  "With topology.hosts, ranks stream telemetry to their host's agent, which relays "
                  "it to the harness (false: straight to the control plane)");
FAULTLINE_SETTING(kAgentHeartbeatMs, int64_t, "FAULTLINE_AGENT_HEARTBEAT_MS", 1000,
                  "How often a per-host agent reports when it has nothing else to say (a host "
                  "silent for 5 of these while its peers are heard is lost)");

// Writes one report on the agent's Attach stream (thread-safe); false once it is broken.
using AgentWrite = std::function<bool(const faultline::v1::AgentReport&)>;

class TelemetryRelay {
 public:
  TelemetryRelay(std::string run_dir, std::string host, std::string secret, AgentWrite write);
  ~TelemetryRelay();
  // Starts listening; the address the host's ranks use, or "" with `why` (the ranks then stream
  // to the harness directly).
  std::string start(std::string& why);
  // Hands `cmd` to rank `rank`'s stream (-1: every rank's); how many streams took it.
  int deliver(int rank, const faultline::v1::WorkerCommand& cmd);
  // Ends the ranks' streams and the server (bounded). Idempotent.
  void stop();
  uint64_t batches() const;
  uint64_t events() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Sends a heartbeat report through `write` every `interval` until stopped or the stream breaks.
class Heartbeat {
 public:
  Heartbeat(AgentWrite write, std::chrono::milliseconds interval);
  ~Heartbeat();
  void stop();

 private:
  AgentWrite write_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread t_;
};

}  // namespace fl::harness
