// Out-of-process fault kinds: what the harness does to a run from outside its processes. Each
// kind is one file in this folder and one line in registry.cpp. A kind declares its scenario keys
// (`faults[].KEY...`, for validation and docs/scenarios.md), parses a `faults:` item into a Fault,
// and the Fault goes through the run's lifecycle in the spirit of Jepsen's nemesis: set up before
// launch, change a rank's launch, inject at its time (launch, a step, or after every rank ended),
// observe rank exits, heal. Every step is optional; healing must be idempotent and never throw.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "harness/model/scenario.hpp"

namespace fl::harness {
class History;
class Supervisor;
struct ProcessSpec;
}  // namespace fl::harness

namespace fl::harness::faults {

class Sandbox;
class NodeHandler;

// `at:` — when a timed fault acts.
enum class When { kLaunch, kStep, kExit };
const char* when_name(When w);

// What a fault may use during a run.
struct Host {
  const Scenario& s;
  const std::string& dir;  // the run directory
  History& hist;
  Supervisor& sup;
  Sandbox& box;  // the run's network and mount namespaces
  int master_port = 0;
  std::string plugin_dir;              // where the workers' plugins are (this build's, or set)
  std::vector<std::string>& injected;  // one line per thing done, shown in the run's summary
  // A `fault_injected` history event (data gets "fault": kind) and its summary line.
  void record(const std::string& kind, nlohmann::json data, int rank, std::string line);
};

// A rank's launch as faults may change it. `unset` names variables removed from env (mpirun's
// app file cannot remove a variable; the launcher empties them there).
struct Launch {
  ProcessSpec& spec;
  std::map<std::string, std::string>& env;
  std::vector<std::string>& unset;
};

// Where the job stands when a step-triggered fault is considered.
struct Progress {
  const std::map<int, int64_t>& max_step;  // each rank's last reported step
  std::function<pid_t(int)> pid_of;        // 0: not known yet
  std::function<bool(int)> is_local_child;
};

class Fault {
 public:
  // Set by the parser for every kind.
  std::string kind;
  int rank = -1;  // -1: every rank
  int64_t step = 0;
  When at = When::kStep;
  bool restart = false;  // restart every rank from the latest checkpoint once injected

  virtual ~Fault() = default;
  virtual std::unique_ptr<Fault> clone() const = 0;  // each run drives its own copy
  // The kind's parameters as written in history and read by tests.
  virtual nlohmann::json params() const = 0;
  // True: the fault acts at `at` (inject); false: set-up only (it is in place from launch).
  virtual bool timed() const { return false; }

  virtual void setup(Host&) {}
  virtual void adjust_rank(const Host&, int /*rank*/, Launch&) const {}
  // Returns false when it cannot act yet (e.g. the target rank's pid is unknown): asked again on
  // the next progress. Throwing Error records `fault_failed` and the run goes on.
  virtual bool inject(Host&, const Progress*, When) { return true; }
  virtual void on_rank_exit(Host&, int /*rank*/) {}
  // A rank whose end the harness saw only through its launcher (mpirun over hosts): a fault that
  // knows more (a host's agent saw the kernel's OOM killer end it) fills in the rank_exit data.
  virtual void explain_exit(Host&, int /*rank*/, nlohmann::json& /*exit*/) {}
  // Before teardown (processes_gone false) and after it (true); idempotent, never throws.
  virtual void heal(Host&, bool /*processes_gone*/) {}
};

// CRTP: clone() for a fault that is a plain value.
template <class Derived>
class FaultOf : public Fault {
 public:
  std::unique_ptr<Fault> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

// What a kind's parser may use: the scenario file (for errors), the item's key path
// ("faults[2]") and the scenario loaded so far (ranks, nodes, launcher; a kind may require
// network namespaces).
// Where the workers' plugins are: FAULTLINE_PLUGIN_DIR, or this build's (oop_faults.cpp).
std::string plugin_dir();
// The libraries the workers have there, sorted and unique: the directory's files and, when it is
// this build's, what the build makes (not built yet is not unknown). Empty: nothing to check
// against (an empty directory elsewhere leaves the check to the run).
std::vector<std::string> plugin_libraries();

struct ParseContext {
  const std::string& file;
  const std::string& at;
  Scenario& s;
  // The launchers' traits, given by the loader (harness/launch sits above the fault kinds):
  // whether the launcher named `name` spawns each rank itself, and the launchers that do.
  bool (&rank_processes)(const std::string& name);
  std::string (&rank_process_launchers)();
};

class FaultKind {
 public:
  virtual ~FaultKind() = default;
  // The key that selects the kind in a `faults:` item ("signal": faults[].signal).
  virtual std::string key() const = 0;
  // Its scenario keys (paths start "faults[].").
  virtual std::vector<KeySpec> keys() const = 0;
  // The `at:` values it accepts (empty: none, it is in place from launch).
  virtual std::vector<When> allowed_at() const { return {}; }
  // The item's own fields; nullptr when the item switches the fault off (port_squat: false).
  // Errors through loader::fail_at (file:line:col, key path, what is allowed).
  virtual std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const = 0;
  // What it does on a node, one handler per request message (on_nodes.hpp): the agents and this
  // machine's in-process node apply a request with the handler registered here for its type.
  virtual std::vector<const NodeHandler*> node_handlers() const { return {}; }
};

// Every kind, in registry order (registry.cpp); lookup by key (nullptr: none).
const std::vector<const FaultKind*>& fault_kinds();
const FaultKind* fault_kind(const std::string& key);

// Parses one `faults:` item that is not a plan; nullptr when switched off.
std::unique_ptr<Fault> parse_fault(const ParseContext& c, const YAML::Node& item);

}  // namespace fl::harness::faults
