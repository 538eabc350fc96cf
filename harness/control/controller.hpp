// The gRPC control plane of a run: Connect (worker telemetry in, fault commands out), Observe
// (the merged live stream for detectors), Report (diagnoses into the history) and Control
// (actions handed to the runner). Listens on a unix socket in the run directory by default (or
// loopback TCP when asked); every RPC must carry the run's secret (base/control_auth.hpp) as
// metadata, else it is answered UNAUTHENTICATED and counted.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "harness/history/history.hpp"

namespace grpc {
class Server;
class Service;
}  // namespace grpc
namespace faultline::v1 {
class EventBatch;
class WorkerCommand;
}  // namespace faultline::v1

namespace fl::harness {

// The server pings every connection that said nothing for this long and closes one that does not
// answer within the timeout: a peer whose machine vanished is noticed without traffic of its own.
// Generous on purpose (a loaded machine answers late, not never); the agents' silence relative to
// their peers (agent/silence.hpp) is the quicker judge.
inline constexpr int kControlKeepaliveTimeMs = 10000;
inline constexpr int kControlKeepaliveTimeoutMs = 20000;

struct ControlAction {
  std::string action;  // one of control_action_names()
  int rank = -1;
  int signal = 9;
  std::string plan;
  std::string checkpoint;
  std::string requester;
  std::vector<std::string> args;  // restart_job: appended to every rank's worker arguments
  int dp = 0;                     // restart_job: new data-parallel size (0: unchanged)
};

// The actions Control accepts, in the order the unknown-action error lists them (run_control.cpp's
// table; `faultline control --help` lists them from here).
std::vector<std::string> control_action_names();

struct ControlResult {
  bool ok = false;
  std::string message;
  std::vector<std::string> faults;
};

class Controller {
 public:
  // `on_control` runs on a gRPC thread; it must be thread-safe. `secret` is what every caller
  // must present (metadata kControlSecretHeader); it must not be empty.
  Controller(History& history, std::function<ControlResult(const ControlAction&)> on_control,
             std::string secret);
  ~Controller();

  // Another service on the same server (the per-host agents'); before start(). It checks the
  // secret itself.
  void add_service(grpc::Service* s) { extra_.push_back(s); }
  // Starts serving on `addr` ("127.0.0.1:0" picks a free port; "unix:PATH" makes the socket
  // 0600); returns the bound address.
  std::string start(const std::string& addr);
  // Ends every stream (workers and subscribers) and stops the server.
  void shutdown();

  // A batch of a rank's telemetry that came another way (the per-host agents' relay): ingested
  // exactly as Connect ingests one (history, received, dropped). Thread-safe.
  void ingest(const faultline::v1::EventBatch& batch);
  // Where commands for ranks that are not connected here go (the relay); it returns how many
  // ranks took the command. Before start().
  void relay_commands(std::function<int(int rank, const faultline::v1::WorkerCommand&)> f) {
    relay_commands_ = std::move(f);
  }

  // Sends a fault command to `rank` (-1: every connected rank); returns how many got it.
  int send_command(int rank, const std::string& action, const std::string& plan, uint64_t seed);

  // Per rank: the sequence numbers received (to merge local files later) and drops reported.
  std::map<int, std::set<uint64_t>> received() const;
  std::map<int, uint64_t> dropped() const;
  uint64_t events_ingested() const;
  // Calls refused for a missing or wrong secret.
  uint64_t rejected() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::vector<grpc::Service*> extra_;
  std::function<int(int, const faultline::v1::WorkerCommand&)> relay_commands_;
};

}  // namespace fl::harness
