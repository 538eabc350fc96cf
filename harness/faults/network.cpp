// network: a data-plane fault between simulated nodes (each in its own network namespace):
// reject (refused or reset at once), drop (packets vanish; only timeouts notice), a bandwidth
// limit (tc tbf), or a route that sends the node's traffic to its peers out through another of
// its interfaces (topology.nics). With `store: true` only the node's connections to the
// rendezvous store are cut.
// The node's rules and limit are made where it is (NetworkCut, NetworkLimit, NetworkHeal below):
// on this machine in the harness's process, in the node's namespace; with topology.hosts by the
// host's agent (a host whose agent is lost is healed through the rsh agent).
#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/model/key_checks.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace pb = faultline::v1;

// A chain or device name: letters, digits, '-', '_' and '.', not starting with '-'.
void check_name(const char* request, const char* what, const std::string& v) {
  const bool ok = !v.empty() && v[0] != '-' && std::all_of(v.begin(), v.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!ok) raise<Error>("{}: {} '{}' is not a name (letters, digits, -, _, .)", request, what, v);
}

void check_address(const char* request, const std::string& v) {
  in_addr a{};
  if (::inet_pton(AF_INET, v.c_str(), &a) != 1) {
    raise<Error>("{}: '{}' is not an IPv4 address", request, v);
  }
}

// reject: TCP gets a reset, anything else an ICMP error; drop: packets vanish. One rule per
// match (two for a reject of more than TCP).
void add_rule(Node& n, const pb::NetworkCut& r, const std::vector<std::string>& match) {
  const bool tcp_only = std::find(match.begin(), match.end(), "-p") != match.end();
  std::vector<std::string> rule = {"iptables", "-A", r.chain()};
  rule.insert(rule.end(), match.begin(), match.end());
  if (r.action() == "reject") {
    auto t = rule;
    if (!tcp_only) t.insert(t.end(), {"-p", "tcp"});
    t.insert(t.end(), {"-j", "REJECT", "--reject-with", "tcp-reset"});
    n.run_net(r.netns(), t);
    if (tcp_only) return;
    rule.insert(rule.end(), {"-j", "REJECT"});
  } else {
    rule.insert(rule.end(), {"-j", "DROP"});
  }
  n.run_net(r.netns(), rule);
}

nlohmann::json cut_on_node(Node& n, const pb::NetworkCut& r) {
  check_name("network_cut", "chain", r.chain());
  if (r.action() != "reject" && r.action() != "drop") {
    raise<Error>("network_cut: action '{}' (allowed: reject, drop)", r.action());
  }
  if (r.store_port() != 0) {
    if (r.store_port() < 1 || r.store_port() > 65535) {
      raise<Error>("network_cut: {} is not a port (1-65535)", r.store_port());
    }
    check_address("network_cut", r.store());
    const std::string port = std::to_string(r.store_port());
    add_rule(n, r, {"-d", r.store(), "-p", "tcp", "--dport", port});
    if (r.holds_store()) {
      add_rule(n, r, {"-s", r.store(), "-p", "tcp", "--sport", port, "!", "-d", r.store()});
    }
    return {{"host", n.host()}, {"store", r.store()}};
  }
  for (const auto& peer : r.peers()) check_address("network_cut", peer);
  for (const auto& peer : r.peers()) {
    add_rule(n, r, {"-d", peer});
    add_rule(n, r, {"-s", peer});
  }
  return {{"host", n.host()}, {"peers", r.peers().size()}};
}

nlohmann::json limit_on_node(Node& n, const pb::NetworkLimit& r) {
  check_name("network_limit", "device", r.device());
  check_name("network_limit", "rate", r.rate());
  n.run_net(r.netns(), {"tc", "qdisc", "replace", "dev", r.device(), "root", "tbf", "rate",
                        r.rate(), "burst", "32kbit", "latency", "400ms"});
  return {{"host", n.host()}, {"device", r.device()}, {"rate", r.rate()}};
}

nlohmann::json heal_on_node(Node& n, const pb::NetworkHeal& r) {
  nlohmann::json d = {{"host", n.host()}};
  if (!r.chain().empty()) {
    check_name("network_heal", "chain", r.chain());
    n.run_net(r.netns(), {"iptables", "-F", r.chain()});
    d["flushed"] = r.chain();
  }
  if (!r.device().empty()) {
    check_name("network_heal", "device", r.device());
    n.run_net(r.netns(), {"tc", "qdisc", "del", "dev", r.device(), "root"});
    d["unlimited"] = r.device();
  }
  return d;
}

// The node (as on_node counts them) that holds topology node `node`: with hosts that host, else
// this machine (node 0), whose network namespaces are the topology's nodes; and the namespace a
// request names there (-1 on a host: its own network).
int net_host(const Host& h, int node) {
  return h.s.topo.hosts.empty() ? 0 : node;
}
int net_namespace(const Host& h, int node) {
  return h.s.topo.hosts.empty() ? node : -1;
}

class NetworkFault : public FaultOf<NetworkFault> {
 public:
  std::string action = "drop";
  int node = 0, peer = -1;
  bool store = false;
  std::string rate = "1mbit";
  int nic = 0;
  bool rules = false, shaped = false;  // what heal must undo
  std::vector<int> routed;             // the peers `route` sent out through eth<nic>
  int64_t sent_before = -1;            // eth<nic>'s sent bytes when the routes went in

  nlohmann::json params() const override {
    return {{"action", action}, {"node", node}, {"peer", peer},
            {"store", store},   {"rate", rate}, {"nic", nic}};
  }
  bool timed() const override { return true; }

  bool inject(Host& h, const Progress*, When) override {
    if (!h.box.has_network()) raise<Error>("network faults need topology.network: namespaces");
    const int node_at = net_host(h, node);
    nlohmann::json d = {{"action", action}, {"node", node}};
    std::string line;
    if (action == "bandwidth") {
      pb::NetworkLimit req;
      req.set_netns(net_namespace(h, node));
      req.set_device(h.box.device(node, nic));
      req.set_rate(rate);
      shaped = true;
      on_node(h, node_at, req, "network");
      d["rate"] = rate;
      if (nic != 0) d["device"] = h.box.device(node, nic);
      line = fmt::format("node {} limited to {}", node, rate);
    } else if (action == "route") {
      line = route(h, d);
    } else {
      pb::NetworkCut req;
      req.set_netns(net_namespace(h, node));
      req.set_chain(h.box.chain());
      req.set_action(action);
      if (store) {
        req.set_store(h.box.ip(0));
        req.set_store_port(h.master_port);
        req.set_holds_store(node == 0);
        d["store"] = fmt::format("{}:{}", req.store(), h.master_port);
        line = fmt::format("node {} cut from the store ({})", node, action);
      } else {
        std::vector<int> peers;
        for (int k = 0; k < h.s.topo.nodes; ++k) {
          if (k == node || (peer >= 0 && k != peer)) continue;
          req.add_peers(h.box.ip(k));
          peers.push_back(k);
        }
        d["peers"] = peers;
        line = fmt::format("node {} cut from node(s) {} ({})", node, fmt::join(peers, ","), action);
      }
      rules = true;  // some rules may be in place even if a later one fails
      on_node(h, node_at, req, "network");
    }
    d.update(where(h, node_at));
    h.record("network", d, -1, line);
    return true;
  }

  void heal(Host& h, bool) override {
    pb::NetworkHeal req;
    req.set_netns(net_namespace(h, node));
    if (rules) {
      req.set_chain(h.box.chain());
      undo(h, "network", req, {"iptables", "-F", h.box.chain()});
    }
    if (shaped) {
      req.clear_chain();
      req.set_device(h.box.device(node, nic));
      undo(h, "bandwidth", req, {"tc", "qdisc", "del", "dev", h.box.device(node, nic), "root"});
    }
    rules = shaped = false;
    unroute(h);
  }

 private:
  // route: one host route per peer's eth0 address through eth<nic>, keeping eth0's address as
  // the source, so the peers still know the sender and answer over eth0 (NVIDIA/nccl#1581: a
  // node whose routing table sends to the job's subnet through its 1 GbE port sends there and
  // receives on the fast one). Namespaced nodes only (the parse refuses hosts).
  std::string route(Host& h, nlohmann::json& d) {
    const std::string dev = h.box.device(node, nic);
    sent_before = sent_bytes(h);
    for (int k = 0; k < h.s.topo.nodes; ++k) {
      if (k == node || (peer >= 0 && k != peer)) continue;
      // `replace` adds the route or adds nothing: heal deletes only those that went in.
      h.box.run_on(
          node, {"ip", "route", "replace", h.box.ip(k) + "/32", "dev", dev, "src", h.box.ip(node)});
      routed.push_back(k);
    }
    d["peers"] = routed;
    d["device"] = dev;
    return fmt::format("node {} sends to node(s) {} through {}", node, fmt::join(routed, ","), dev);
  }

  // What eth<nic> of the node has sent (its kernel counter), -1 when it cannot be read.
  int64_t sent_bytes(Host& h) const {
    try {
      const auto j = nlohmann::json::parse(
          h.box.run_on(node, {"ip", "-s", "-j", "link", "show", "dev", h.box.device(node, nic)}));
      return j.at(0).at("stats64").at("tx").at("bytes").get<int64_t>();
    } catch (const std::exception&) {
      return -1;
    }
  }

  void unroute(Host& h) {
    if (routed.empty()) return;
    nlohmann::json d = {{"fault", "route"}, {"node", node}, {"peers", routed}};
    // How much left through the wrong port while the routes stood: the mechanism, in bytes.
    const int64_t after = sent_bytes(h);
    if (after >= 0 && sent_before >= 0) d["sent_bytes"] = after - sent_before;
    for (int k : routed) {
      try {
        h.box.run_on(node,
                     {"ip", "route", "del", h.box.ip(k) + "/32", "dev", h.box.device(node, nic)});
      } catch (const std::exception& e) {
        d["errors"].push_back(e.what());  // the namespace may be gone with its holder
      }
    }
    routed.clear();
    try {
      h.hist.harness(d.contains("errors") ? "heal_error" : "fault_healed", d);
    } catch (...) {
    }
  }

  // The node undoes it; a host whose agent is gone (the run ends) through the rsh agent (`argv`).
  void undo(Host& h, const char* what, const pb::NetworkHeal& req,
            const std::vector<std::string>& argv) {
    nlohmann::json d = {{"fault", what}, {"node", node}};
    try {
      const int node_at = net_host(h, node);
      if (reachable(h, node_at)) {
        on_node(h, node_at, req, what);
        d.update(where(h, node_at));
      } else {
        h.box.run_on(node, argv);
        d.update({{"via", "rsh"}, {"host", node_name(h, node_at)}});
      }
      h.hist.harness("fault_healed", d);
    } catch (const std::exception& e) {
      try {
        h.hist.harness("heal_error", {{"fault", what}, {"error", e.what()}});
      } catch (...) {
      }
    }
  }
};

// `nic` names one of topology.nics (0: eth0); route needs another than eth0, bandwidth one that
// topology.nics does not already limit (healing it would lift that limit too).
void check_nic(const ParseContext& c, const YAML::Node& n, const NetworkFault& f) {
  const std::string key = c.at + ".network.nic";
  const YAML::Node at = n["nic"] ? n["nic"] : n;
  const int have = static_cast<int>(c.s.topo.nics.size());
  const std::string none =
      "topology.nics lists no interface besides eth0: add one, e.g. topology.nics: [8mbit]";
  if (f.nic > have) {
    loader::fail_at(c.file, at, key,
                    have == 0 ? fmt::format("eth{} does not exist ({})", f.nic, none)
                              : fmt::format("eth{} does not exist (allowed 0-{}: eth0, and eth1 "
                                            "on as topology.nics lists them)",
                                            f.nic, have));
  }
  if (f.action == "route" && f.nic == 0) {
    const std::string allowed =
        have == 0 ? none : fmt::format("allowed 1-{}; topology.nics lists them", have);
    loader::fail_at(
        c.file, at, key,
        "route sends the node's traffic out through another interface than eth0 (" + allowed + ")");
  }
  if (f.action == "route" && (f.store || c.s.topo.nodes < 2)) {
    loader::fail_at(c.file, n, c.at + ".network",
                    "route needs topology.nodes >= 2 and no store: true (it routes a node's "
                    "traffic to its peers)");
  }
  if (f.action == "bandwidth" && f.nic > 0 && c.s.topo.nics[f.nic - 1] != "unlimited") {
    loader::fail_at(c.file, at, key,
                    fmt::format("eth{} is already limited to {} by topology.nics (allowed: an "
                                "unlimited interface)",
                                f.nic, c.s.topo.nics[f.nic - 1]));
  }
  if (f.action != "bandwidth" && f.action != "route" && f.nic != 0) {
    loader::fail_at(c.file, at, key,
                    fmt::format("{} cuts the node's links on every interface (allowed: nic with "
                                "bandwidth or route)",
                                f.action));
  }
}

class NetworkKind : public FaultKind {
 public:
  std::string key() const override { return "network"; }
  std::vector<KeySpec> keys() const override {
    return {
        {"faults[].network", KeyType::kSection, "", "Data-plane network fault between nodes"},
        {"faults[].network.action",
         KeyType::kEnum,
         "drop",
         "reject (refused at once), drop (silently lost), bandwidth (tbf rate limit) or route "
         "(`node` sends to its peers out through interface eth`nic`, keeping eth0's address as "
         "the source: its routing table picks the wrong port)",
         {"reject", "drop", "bandwidth", "route"}},
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
        {"faults[].network.rate", KeyType::kString, "1mbit", "bandwidth: tbf rate (tc syntax)"},
        {"faults[].network.nic",
         KeyType::kInt,
         "0",
         "bandwidth: the interface limited (eth`nic`); route: the one the node's traffic leaves "
         "through (1 or more; topology.nics lists them)",
         {},
         0,
         3}};
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
    f->nic = loader::opt<int>(n, "nic", 0);
    if (!c.s.topo.hosts.empty() && (f->action == "route" || f->nic != 0)) {
      loader::fail_at(c.file, n, c.at + ".network",
                      "route and nic need the nodes' network namespaces on this machine "
                      "(topology.nics), not topology.hosts");
    }
    check_nic(c, n, *f);
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
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::NetworkCut> cut(&cut_on_node);
    static const NodeHandlerOf<pb::NetworkLimit> limit(&limit_on_node);
    static const NodeHandlerOf<pb::NetworkHeal> heal(&heal_on_node);
    return {&cut, &limit, &heal};
  }
};

}  // namespace

const FaultKind& network_kind() {
  static const NetworkKind k;
  return k;
}

}  // namespace fl::harness::faults
