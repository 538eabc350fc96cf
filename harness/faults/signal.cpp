// signal: send a signal to a rank once it reports a step (a crash, a stop, a kill from outside).
// The rank's node sends it (SignalRank below): this machine in the harness's process, or the agent
// of the rank's host; with launcher srun and no hosts each node's agent in turn, and the one whose
// node runs the rank signals it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace pb = faultline::v1;

// On a node: the signal, once the pid is the rank's there ({delivered, host} and, when not, why).
nlohmann::json signal_on_node(Node& n, const pb::SignalRank& r) {
  std::string why;
  const bool ok = n.signal_rank(r.rank(), r.pid(), r.signal(), why);
  nlohmann::json d = {{"delivered", ok}, {"host", n.host()}};
  if (!ok) d["why"] = why;
  return d;
}

class SignalFault : public FaultOf<SignalFault> {
 public:
  std::string signal;  // STOP, KILL, ...
  nlohmann::json params() const override { return {{"signal", signal}}; }
  bool timed() const override { return true; }
  bool inject(Host& h, const Progress* p, When) override {
    const pid_t pid = p ? p->pid_of(rank) : 0;
    if (pid == 0) return false;  // not started (or not said hello) yet
    const int64_t at_step = p->max_step.count(rank) ? p->max_step.at(rank) : step;
    pb::SignalRank req;
    req.set_rank(rank);
    req.set_pid(pid);
    req.set_signal(signal_number(signal));
    const auto targets = nodes_of(h, rank);
    int on = targets.size() == 1 ? targets[0] : -1;  // -1: none of several found the rank
    std::vector<std::string> nots;
    bool ok = false;
    for (const int node : targets) {
      try {
        const auto r = on_node(h, node, req, fmt::format("signal to rank {}", rank));
        if ((ok = r.value("delivered", false))) {
          on = node;
          break;
        }
        nots.push_back(r.value("why", ""));
      } catch (const std::exception& e) {  // its agent is not up
        nots.push_back(e.what());
      }
    }
    nlohmann::json d = {{"signal", "SIG" + signal}, {"pid", pid}, {"at_step", at_step}};
    d.update(where(h, on));
    if (!ok) d["why"] = fmt::format("{}", fmt::join(nots, "; "));
    d["delivered"] = ok;
    h.record("signal", d, rank, fmt::format("SIG{} to rank {} at step {}", signal, rank, at_step));
    return true;
  }
};

class SignalKind : public FaultKind {
 public:
  std::string key() const override { return "signal"; }
  std::vector<KeySpec> keys() const override {
    return {{"faults[].signal",
             KeyType::kEnum,
             "",
             "Send this signal to `rank` once it reports `step`",
             {"STOP", "CONT", "KILL", "TERM", "SEGV", "ABRT", "INT"}}};
  }
  std::vector<When> allowed_at() const override { return {When::kStep}; }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<SignalFault>();
    f->signal = item["signal"].as<std::string>();
    if (!item["rank"] || item["rank"].as<int>() < 0) {
      loader::fail_at(c.file, item, c.at + ".rank", "a signal fault needs a rank (0 or more)");
    }
    return f;
  }
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::SignalRank> signal(&signal_on_node);
    return {&signal};
  }
};

}  // namespace

const FaultKind& signal_kind() {
  static const SignalKind k;
  return k;
}

}  // namespace fl::harness::faults
