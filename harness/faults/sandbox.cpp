#include "harness/faults/sandbox.hpp"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/history/history.hpp"
#include "harness/model/placement.hpp"
#include "harness/model/scenario.hpp"
#include "harness/process/hosts.hpp"
#include "harness/process/supervisor.hpp"

extern "C" char** environ;

namespace fl::harness::faults {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSubnet = "10.200.0";  // each run has its own isolated hub: no clash

// /proc/PID/ns/KIND differs from ours once the holder has unshared it.
void wait_for_namespace(pid_t pid, const char* kind) {
  const std::string mine = fs::read_symlink(fmt::format("/proc/self/ns/{}", kind)).string();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    std::error_code ec;
    const auto theirs = fs::read_symlink(fmt::format("/proc/{}/ns/{}", pid, kind), ec);
    if (!ec && theirs.string() != mine) return;
    if (std::chrono::steady_clock::now() > until) {
      raise<Error>(
          "namespace holder {} did not create a {} namespace within 10 s (creating namespaces "
          "needs root or CAP_SYS_ADMIN; see helpers.log in the run directory)",
          pid, kind);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void join_network(std::map<std::string, std::string>& env) {
  const std::string net = fmt::format("{}.0/24", kSubnet);
  env["OMPI_MCA_btl_tcp_if_include"] = net;
  env["OMPI_MCA_oob_tcp_if_include"] = net;
  // PyTorch's gloo binds the address its host name resolves to (loopback inside a namespace)
  // unless told the interface: each node's link is eth0 (a command workload's torch ranks).
  env["GLOO_SOCKET_IFNAME"] = "eth0";
}

}  // namespace

Sandbox::Sandbox(const Scenario& s, std::string run_dir, History& hist, Supervisor& sup)
    : s_(s), dir_(std::move(run_dir)), hist_(hist), sup_(sup) {}

Sandbox::~Sandbox() {
  // The node's handlers may still use the sandbox to undo what they did: before its members go.
  local_.reset();
}

Node& Sandbox::local_node() {
  // The run's secret is not needed here: the ranks of this machine are the harness's children.
  if (!local_) local_ = std::make_unique<Node>(dir_, "local", "", this);
  return *local_;
}

std::string Sandbox::node_ip(int node) {
  return nic_ip(node, 0);
}

std::string Sandbox::nic_ip(int node, int nic) {
  return fmt::format("10.200.{}.{}", nic, node + 1);  // nic 0: kSubnet's
}

pid_t Sandbox::spawn_holder(const std::string& name, const std::vector<std::string>& unshare_args) {
  ProcessSpec p;
  p.name = name;
  p.argv = {"unshare"};
  for (auto& a : unshare_args) p.argv.push_back(a);
  p.argv.push_back("sleep");
  p.argv.push_back("infinity");
  p.cwd = dir_;
  for (char** e = environ; *e != nullptr; ++e) p.env.push_back(*e);
  return sup_.spawn(p);
}

std::vector<std::string> Sandbox::in_net(int node, std::vector<std::string> argv) const {
  if (!s_.topo.hosts.empty()) return on_host(s_, s_.topo.hosts.at(static_cast<size_t>(node)), argv);
  const pid_t holder = node < 0 ? hub_ : node_holders_.at(static_cast<size_t>(node));
  argv.insert(argv.begin(), {"nsenter", fmt::format("--net=/proc/{}/ns/net", holder)});
  return argv;
}

std::vector<std::string> Sandbox::in_mount(std::vector<std::string> argv) {
  if (mount_holder_ == 0) {
    mount_holder_ = spawn_holder("mount namespace", {"--mount", "--propagation", "private"});
    wait_for_namespace(mount_holder_, "mnt");
  }
  argv.insert(argv.begin(), {"nsenter", fmt::format("--mount=/proc/{}/ns/mnt", mount_holder_)});
  return argv;
}

void Sandbox::setup_network() {
  if (!s_.topo.hosts.empty()) return setup_hosts();
  const auto t0 = std::chrono::steady_clock::now();
  hub_ = spawn_holder("netns hub", {"--net"});
  wait_for_namespace(hub_, "net");
  run_tool(in_net(-1, {"ip", "link", "set", "lo", "up"}));
  run_tool(in_net(-1, {"ip", "link", "add", "br0", "type", "bridge"}));
  run_tool(in_net(-1, {"ip", "addr", "add", fmt::format("{}.254/24", kSubnet), "dev", "br0"}));
  run_tool(in_net(-1, {"ip", "link", "set", "br0", "up"}));
  for (int k = 0; k < s_.topo.nodes; ++k) {
    const pid_t h = spawn_holder(fmt::format("netns node{}", k), {"--net"});
    node_holders_.push_back(h);
    wait_for_namespace(h, "net");
    const std::string veth = fmt::format("fl{}", k);
    run_tool(in_net(-1, {"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns",
                         std::to_string(h)}));
    run_tool(in_net(-1, {"ip", "link", "set", veth, "master", "br0", "up"}));
    run_tool(in_net(k, {"ip", "link", "set", "lo", "up"}));
    run_tool(in_net(k, {"ip", "addr", "add", node_ip(k) + "/24", "dev", "eth0"}));
    run_tool(in_net(k, {"ip", "link", "set", "eth0", "up"}));
    // One chain per node holds every rule a fault adds: healing flushes it.
    run_tool(in_net(k, {"iptables", "-N", "FAULTLINE"}));
    run_tool(in_net(k, {"iptables", "-I", "INPUT", "-j", "FAULTLINE"}));
    run_tool(in_net(k, {"iptables", "-I", "OUTPUT", "-j", "FAULTLINE"}));
  }
  add_nics();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> ips;
  for (int k = 0; k < s_.topo.nodes; ++k) ips.push_back(node_ip(k));
  nlohmann::json nics = nlohmann::json::array();
  for (size_t i = 0; i < s_.topo.nics.size(); ++i) {
    const int nic = static_cast<int>(i) + 1;
    nics.push_back({{"device", fmt::format("eth{}", nic)},
                    {"subnet", fmt::format("10.200.{}.0/24", nic)},
                    {"rate", s_.topo.nics[i]},
                    {"rp_filter", 0},
                    {"arp_ignore", 0}});
  }
  hist_.harness("network_setup", {{"nodes", s_.topo.nodes},
                                  {"addresses", ips},
                                  {"nics", nics},
                                  {"bridge", fmt::format("{}.254", kSubnet)},
                                  {"setup_ms", ms}});
}

// topology.nics: interface eth<i> of every node on 10.200.<i>.0/24 behind bridge br<i> of the
// hub, its egress limited by tbf unless unlimited. Each node reaches the others on every subnet;
// which interface carries the ranks' traffic is the routing table's choice (network fault
// `route`) and their environment's (OMPI_MCA_btl_tcp_if_include, GLOO_SOCKET_IFNAME).
void Sandbox::add_nics() {
  if (s_.topo.nics.empty()) return;
  // A new namespace takes the host's IPv4 settings (net.core.devconf_inherit_init_net 0): a host
  // with strict reverse-path filtering (rp_filter 1) or arp_ignore would drop what a `route`
  // sends out of one port with another port's address, a cut instead of a slow port. Loose
  // settings on every node, whatever the host has.
  for (int k = 0; k < s_.topo.nodes; ++k) {
    std::vector<std::string> argv = {"sysctl",
                                     "-q",
                                     "-w",
                                     "net.ipv4.conf.all.rp_filter=0",
                                     "net.ipv4.conf.default.rp_filter=0",
                                     "net.ipv4.conf.eth0.rp_filter=0",
                                     "net.ipv4.conf.all.arp_ignore=0"};
    run_tool(in_net(k, argv));
  }
  for (size_t i = 0; i < s_.topo.nics.size(); ++i) {
    const int nic = static_cast<int>(i) + 1;
    const std::string bridge = fmt::format("br{}", nic), dev = fmt::format("eth{}", nic);
    run_tool(in_net(-1, {"ip", "link", "add", bridge, "type", "bridge"}));
    run_tool(
        in_net(-1, {"ip", "addr", "add", fmt::format("10.200.{}.254/24", nic), "dev", bridge}));
    run_tool(in_net(-1, {"ip", "link", "set", bridge, "up"}));
    for (int k = 0; k < s_.topo.nodes; ++k) {
      const std::string veth = fmt::format("fl{}n{}", k, nic);
      run_tool(in_net(-1, {"ip", "link", "add", veth, "type", "veth", "peer", "name", dev, "netns",
                           std::to_string(node_holders_.at(static_cast<size_t>(k)))}));
      run_tool(in_net(-1, {"ip", "link", "set", veth, "master", bridge, "up"}));
      run_tool(in_net(k, {"ip", "addr", "add", nic_ip(k, nic) + "/24", "dev", dev}));
      run_tool(in_net(k, {"sysctl", "-q", "-w", fmt::format("net.ipv4.conf.{}.rp_filter=0", dev)}));
      run_tool(in_net(k, {"ip", "link", "set", dev, "up"}));
      if (s_.topo.nics[i] != "unlimited") {
        run_tool(in_net(k, {"tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                            s_.topo.nics[i], "burst", "32kbit", "latency", "400ms"}));
      }
    }
  }
}

std::string Sandbox::master_addr() const {
  if (!s_.topo.hosts.empty())
    return s_.topo.host_addrs[0].empty() ? s_.topo.hosts[0] : s_.topo.host_addrs[0];
  return has_network() ? node_ip(0) : "127.0.0.1";
}

std::string Sandbox::hub_netns() const {
  return hub_ == 0 ? "" : fmt::format("/proc/{}/ns/net", hub_);
}

std::string Sandbox::hub_addr() {
  return fmt::format("{}.254", kSubnet);
}

std::string Sandbox::ip(int node) const {
  if (!s_.topo.hosts.empty()) return s_.topo.host_addrs.at(static_cast<size_t>(node));
  return node_ip(node);
}

std::string Sandbox::device(int node) const {
  return host_devs_.empty() ? "eth0" : host_devs_.at(static_cast<size_t>(node));
}

std::string Sandbox::device(int node, int nic) const {
  return nic == 0 ? device(node) : fmt::format("eth{}", nic);
}

void Sandbox::adjust_rank(int rank, ProcessSpec& spec,
                          std::map<std::string, std::string>& env) const {
  if (!node_holders_.empty()) {
    spec.namespaces.push_back(fmt::format(
        "/proc/{}/ns/net", node_holders_.at(static_cast<size_t>(node_of_rank(s_.topo, rank)))));
    join_network(env);
  }
  if (mount_holder_ != 0) spec.namespaces.push_back(fmt::format("/proc/{}/ns/mnt", mount_holder_));
  // The cgroups this machine's node made for the rank (cpu_quota, memory_limit): it starts in them.
  if (local_) {
    for (auto& procs : local_->spawn_cgroups(rank)) spec.cgroup_procs.push_back(std::move(procs));
  }
}

void Sandbox::adjust_helper(ProcessSpec& spec, std::map<std::string, std::string>& env) const {
  if (!node_holders_.empty()) {
    spec.namespaces.push_back(fmt::format("/proc/{}/ns/net", hub_));
    join_network(env);
  }
  if (mount_holder_ != 0) spec.namespaces.push_back(fmt::format("/proc/{}/ns/mnt", mount_holder_));
}

void Sandbox::adjust_node(int node, ProcessSpec& spec,
                          std::map<std::string, std::string>& env) const {
  if (!node_holders_.empty()) {
    spec.namespaces.push_back(
        fmt::format("/proc/{}/ns/net", node_holders_.at(static_cast<size_t>(node))));
    join_network(env);
  }
  if (mount_holder_ != 0) spec.namespaces.push_back(fmt::format("/proc/{}/ns/mnt", mount_holder_));
}

void Sandbox::check_gone() {
  remove_host_chains();  // hosts outlive the run: their chains go explicitly
  // Namespaces end with their holders (killed with the run's processes).
  std::vector<pid_t> holders = node_holders_;
  if (hub_) holders.push_back(hub_);
  if (mount_holder_) holders.push_back(mount_holder_);
  if (holders.empty()) return;
  int alive = 0;
  for (pid_t p : holders) alive += fs::exists(fmt::format("/proc/{}/ns", p)) ? 1 : 0;
  try {
    hist_.harness("fault_healed", {{"fault", "namespaces"}, {"holders_left", alive}});
  } catch (...) {
  }
  node_holders_.clear();
  hub_ = mount_holder_ = 0;
}

}  // namespace fl::harness::faults
