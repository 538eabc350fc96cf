// signal: send a signal to a rank once it reports a step (a crash, a stop, a kill from outside).
#include <fmt/format.h>

#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/model/placement.hpp"
#include "harness/process/supervisor.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class SignalFault : public FaultOf<SignalFault> {
 public:
  std::string signal;  // STOP, KILL, ...
  nlohmann::json params() const override { return {{"signal", signal}}; }
  bool timed() const override { return true; }
  bool inject(Host& h, const Progress* p, When) override {
    const pid_t pid = p ? p->pid_of(rank) : 0;
    if (pid == 0) return false;  // not started (or not said hello) yet
    const int sig = signal_number(signal);
    const int64_t at_step = p->max_step.count(rank) ? p->max_step.at(rank) : step;
    nlohmann::json d = {{"signal", "SIG" + signal}, {"pid", pid}, {"at_step", at_step}};
    bool ok = false;
    // With hosts the rank's pid is one on its host: that host's agent sends the signal.
    const int node = host_of_rank(h.s.topo, rank);
    if (node >= 0 && h.box.agents() && h.box.agents()->up(node)) {
      std::string why;
      ok = h.box.agents()->signal(node, rank, pid, sig, why);
      d["via"] = "agent";
      d["host"] = h.s.topo.hosts.at(static_cast<size_t>(node));
      if (!ok) d["why"] = why;
    } else if (node < 0 && h.box.agents() && h.box.agents()->up(0)) {
      // launcher srun without hosts: Slurm placed the rank; the agent on its node signals it.
      std::string host, why;
      ok = h.box.agents()->signal_anywhere(rank, pid, sig, host, why);
      d["via"] = "agent";
      d["host"] = host;
      if (!ok) d["why"] = why;
    } else {
      ok = p->is_local_child(rank) ? h.sup.signal(pid, sig) : h.sup.signal_descendant(pid, sig);
    }
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
};

}  // namespace

const FaultKind& signal_kind() {
  static const SignalKind k;
  return k;
}

}  // namespace fl::harness::faults
