// network: a data-plane fault between simulated nodes (each in its own network namespace):
// reject (refused or reset at once), drop (packets vanish; only timeouts notice), or a bandwidth
// limit (tc tbf). With `store: true` only the node's connections to the rendezvous store are cut.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class NetworkFault : public FaultOf<NetworkFault> {
 public:
  std::string action = "drop";
  int node = 0, peer = -1;
  bool store = false;
  std::string rate = "1mbit";
  bool rules = false, shaped = false;  // what heal must undo

  nlohmann::json params() const override {
    return {{"action", action}, {"node", node}, {"peer", peer}, {"store", store}, {"rate", rate}};
  }
  bool timed() const override { return true; }

  bool inject(Host& h, const Progress*, When) override {
    if (!h.box.has_network()) raise<Error>("network faults need topology.network: namespaces");
    nlohmann::json d = {{"action", action}, {"node", node}};
    std::string line;
    if (action == "bandwidth") {
      h.box.run_on(node, {"tc", "qdisc", "replace", "dev", h.box.device(node), "root", "tbf",
                          "rate", rate, "burst", "32kbit", "latency", "400ms"});
      shaped = true;
      d["rate"] = rate;
      line = fmt::format("node {} limited to {}", node, rate);
    } else if (store) {
      rules = true;
      const std::string port = std::to_string(h.master_port);
      const std::string ip0 = h.box.ip(0);
      rule(h, {"-d", ip0, "-p", "tcp", "--dport", port});
      if (node == 0) rule(h, {"-s", ip0, "-p", "tcp", "--sport", port, "!", "-d", ip0});
      d["store"] = fmt::format("{}:{}", ip0, port);
      line = fmt::format("node {} cut from the store ({})", node, action);
    } else {
      rules = true;
      std::vector<int> peers;
      for (int k = 0; k < h.s.topo.nodes; ++k) {
        if (k == node || (peer >= 0 && k != peer)) continue;
        rule(h, {"-d", h.box.ip(k)});
        rule(h, {"-s", h.box.ip(k)});
        peers.push_back(k);
      }
      d["peers"] = peers;
      line = fmt::format("node {} cut from node(s) {} ({})", node, fmt::join(peers, ","), action);
    }
    if (!h.s.topo.hosts.empty()) {
      d["host"] = h.s.topo.hosts.at(static_cast<size_t>(node));
      d["via"] = h.box.via(node);  // the host's agent, or the rsh agent
    }
    h.record("network", d, -1, line);
    return true;
  }

  void heal(Host& h, bool) override {
    auto quietly = [&](const char* what, const std::vector<std::string>& argv) {
      try {
        h.box.run_on(node, argv);
        h.hist.harness("fault_healed", {{"fault", what}, {"node", node}, {"via", h.box.via(node)}});
      } catch (const std::exception& e) {
        try {
          h.hist.harness("heal_error", {{"fault", what}, {"error", e.what()}});
        } catch (...) {
        }
      }
    };
    if (rules) quietly("network", {"iptables", "-F", h.box.chain()});
    if (shaped) quietly("bandwidth", {"tc", "qdisc", "del", "dev", h.box.device(node), "root"});
    rules = shaped = false;
  }

 private:
  // reject: TCP gets a reset, anything else an ICMP error; drop: packets vanish.
  void rule(Host& h, const std::vector<std::string>& match) const {
    const bool tcp_only = std::find(match.begin(), match.end(), "-p") != match.end();
    std::vector<std::string> r = {"iptables", "-A", h.box.chain()};
    r.insert(r.end(), match.begin(), match.end());
    if (action == "reject") {
      auto t = r;
      if (!tcp_only) t.insert(t.end(), {"-p", "tcp"});
      t.insert(t.end(), {"-j", "REJECT", "--reject-with", "tcp-reset"});
      h.box.run_on(node, t);
      if (tcp_only) return;
      r.insert(r.end(), {"-j", "REJECT"});
    } else {
      r.insert(r.end(), {"-j", "DROP"});
    }
    h.box.run_on(node, r);
  }
};

class NetworkKind : public FaultKind {
 public:
  std::string key() const override { return "network"; }
  std::vector<KeySpec> keys() const override {
    return {
        {"faults[].network", KeyType::kSection, "", "Data-plane network fault between nodes"},
        {"faults[].network.action",
         KeyType::kEnum,
         "drop",
         "reject (refused at once), drop (silently lost) or bandwidth (tbf rate limit)",
         {"reject", "drop", "bandwidth"}},
        {"faults[].network.node",
         KeyType::kInt,
         "0",
         "The node whose traffic is cut or limited",
         {},
         0,
         63},
        {"faults[].network.peer",
         KeyType::kInt,
         "-1",
         "The other node (-1: every other node)",
         {},
         -1,
         63},
        {"faults[].network.store", KeyType::kBool, "false",
         "Cut only `node`'s connections to the rendezvous store"},
        {"faults[].network.rate", KeyType::kString, "1mbit", "bandwidth: tbf rate (tc syntax)"}};
  }
  std::vector<When> allowed_at() const override {
    return {When::kLaunch, When::kStep, When::kExit};
  }
  std::unique_ptr<Fault> parse(const ParseContext& c, const YAML::Node& item) const override {
    auto f = std::make_unique<NetworkFault>();
    const auto n = item["network"];
    f->action = loader::opt<std::string>(n, "action", "drop");
    f->node = loader::opt<int>(n, "node", 0);
    f->peer = loader::opt<int>(n, "peer", -1);
    f->store = loader::opt<bool>(n, "store", false);
    f->rate = loader::opt<std::string>(n, "rate", "1mbit");
    if (n["rate"]) loader::check_tc_rate(c.file, n["rate"], c.at + ".network.rate");
    for (auto [key, v] : {std::pair{"node", f->node}, std::pair{"peer", f->peer}}) {
      if (v >= c.s.topo.nodes) {
        loader::fail_at(c.file, n[key] ? n[key] : n, c.at + ".network." + key,
                        fmt::format("node {} does not exist (allowed 0-{}; topology.nodes is {})",
                                    v, c.s.topo.nodes - 1, c.s.topo.nodes));
      }
    }
    if (f->peer == f->node) {
      loader::fail_at(c.file, n["peer"], c.at + ".network.peer", "the peer must be another node");
    }
    if (f->action != "bandwidth" && c.s.topo.nodes < 2 && !f->store) {
      loader::fail_at(c.file, n, c.at + ".network",
                      "cutting links needs topology.nodes >= 2 (or store: true)");
    }
    if (!c.s.topo.hosts.empty()) {
      // Between hosts (topology.hosts): the rules go on the hosts themselves.
      for (size_t k = 0; k < c.s.topo.hosts.size(); ++k) {
        if (c.s.topo.host_addrs[k].empty()) {
          loader::fail_at(c.file, n, c.at + ".network",
                          fmt::format("network faults between hosts need every host's address "
                                      "(topology.hosts[{}] is {}; allowed: NAME=ADDRESS)",
                                      k, c.s.topo.hosts[k]));
        }
      }
      return f;
    }
    if (!c.rank_processes(c.s.topo.launcher)) {
      loader::fail_at(c.file, n, c.at + ".network",
                      fmt::format("network faults need topology.launcher: {} ({} starts every rank "
                                  "in one network namespace), or topology.hosts",
                                  c.rank_process_launchers(), c.s.topo.launcher));
    }
    c.s.topo.network = "namespaces";
    return f;
  }
};

}  // namespace

const FaultKind& network_kind() {
  static const NetworkKind k;
  return k;
}

}  // namespace fl::harness::faults
