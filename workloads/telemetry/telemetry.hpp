// Worker telemetry: every rank emits hello, heartbeats, step metrics, collective events, fault
// firings, errors and its exit. Each event is appended at once to the rank's local JSONL file
// (so a cut control plane loses nothing) and queued for the harness's control plane. The queue is
// bounded and never blocks the caller: when the sender falls behind, events are dropped from the
// stream (not from the file) and counted; the count travels with every batch and in the exit event.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/event.hpp"
#include "base/settings.hpp"

namespace fl::telemetry {

FAULTLINE_SETTING(kControlAddr, std::string, "FAULTLINE_CONTROL_ADDR", "",
                  "Harness control plane (host:port or unix:path); empty: local file only");
FAULTLINE_SETTING(kEventsFile, std::string, "FAULTLINE_EVENTS_FILE", "",
                  "This rank's local JSONL event log (empty: none)");
FAULTLINE_SETTING(kQueueSize, int64_t, "FAULTLINE_TELEMETRY_QUEUE", 16384,
                  "Events the stream queue holds before it drops (the local file keeps all)");
FAULTLINE_SETTING(kHeartbeatMs, int64_t, "FAULTLINE_HEARTBEAT_MS", 1000,
                  "Interval between heartbeats (0: none)");

// An event is the run's one event type (base/event.hpp, `fl::Event`): the emitter fills the
// source's fields (source "rank") and appends it to the local file as an EventLine::kRank line.

// Where queued events go. send() returns false once the transport is broken; the sender then
// stops using it (the local file still has everything).
class Transport {
 public:
  virtual ~Transport() = default;
  virtual bool send(const std::vector<Event>& batch, uint64_t dropped_total) = 0;
  virtual void close() = 0;
};

// Commands the harness sends a worker (arm_faults / clear_faults).
using CommandHandler =
    std::function<void(const std::string& action, const std::string& plan, uint64_t seed)>;

// A transport to `addr` (gRPC), or nullptr with `why` set when it cannot be reached in time or
// this build has no gRPC.
std::unique_ptr<Transport> connect_transport(const std::string& addr, int rank,
                                             CommandHandler on_command, std::string* why);

struct Stats {
  uint64_t emitted = 0;
  uint64_t sent = 0;
  uint64_t dropped = 0;
  bool connected = false;
};

struct Options {
  std::string events_file;
  std::string control_addr;
  size_t queue_size = 16384;
  int64_t heartbeat_ms = 1000;
  CommandHandler on_command;
  std::unique_ptr<Transport> transport;  // tests: use this one instead of connecting
};

Options options_from_env();

// Starts this process's telemetry for `rank`. Without start(), emit() does nothing.
void start(int rank, Options options);
bool started();
// Thread-safe; never blocks on the network. `step` < 0 takes the injector's current step. Numbers
// that are not finite become null; text that is not UTF-8 is replaced, never an error.
void emit(std::string_view kind, const nlohmann::json& data = nlohmann::json::object(),
          int64_t step = -1);
// Flushes the file, drains the queue (bounded wait) and stops the threads. Idempotent.
void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(2000));
Stats stats();

}  // namespace fl::telemetry
