// port_squat: another process holds the rendezvous port before launch (a stale job, a second
// job on the node): the store cannot bind it. The node where rank 0's store binds holds it
// (PortSquat below): this machine in the harness's process, or host 0's agent (with launcher srun
// and no hosts every node's: rank 0's node is Slurm's choice).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"
#include "harness/proto/faultline.pb.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

namespace pb = faultline::v1;

// On a node: the ports held, each a listening socket.
struct HeldPorts : NodeState {
  std::map<int, int> fds;  // port -> descriptor
  explicit HeldPorts(Node&) {}
  ~HeldPorts() override { cleanup(); }
  std::vector<std::string> cleanup() override {
    std::vector<std::string> lines;
    for (const auto& [port, fd] : fds) {
      ::close(fd);
      lines.push_back(fmt::format("port_squat released port {}", port));
    }
    fds.clear();
    return lines;
  }
};

// Holds TCP `port` (loopback only, or every address of the host), or lets it go.
nlohmann::json squat_on_node(Node& n, const pb::PortSquat& r) {
  auto& held = n.state<HeldPorts>().fds;
  const int port = r.port();
  if (port < 1 || port > 65535) raise<Error>("port_squat: {} is not a port (1-65535)", port);
  if (!r.hold()) {
    if (auto it = held.find(port); it != held.end()) {
      ::close(it->second);
      held.erase(it);
    }
    return {{"port", port}, {"released", true}, {"host", n.host()}};
  }
  if (held.count(port)) return {{"port", port}, {"held", true}, {"host", n.host()}};
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(r.loopback() ? INADDR_LOOPBACK : INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, 4) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    raise<Error>("port_squat: cannot take port {}: {}", port, std::strerror(e));
  }
  held[port] = fd;
  return {{"port", port}, {"held", true}, {"host", n.host()}};
}

class PortSquatFault : public FaultOf<PortSquatFault> {
 public:
  std::vector<int> held;  // the nodes holding the port
  nlohmann::json params() const override { return nlohmann::json::object(); }

  void setup(Host& h) override {
    auto nodes = fault_nodes(h, 0);
    if (nodes.empty()) {
      if (h.box.has_network()) {
        raise<Error>("port_squat with network namespaces is not supported (squat on the host)");
      }
      nodes = {0};  // this machine
    }
    pb::PortSquat req;
    req.set_port(h.master_port);
    req.set_hold(true);
    for (const int n : nodes) {
      const bool local = in_process(h, n);
      req.set_loopback(local);  // where rank 0's store binds on this machine
      on_node(h, n, req, "port_squat");
      held.push_back(n);
      if (local) {
        h.record("port_squat", {{"port", h.master_port}}, -1,
                 fmt::format("port {} held before launch", h.master_port));
        continue;
      }
      const std::string host = node_name(h, n);
      h.record("port_squat", {{"port", h.master_port}, {"host", host}, {"via", "agent"}}, -1,
               fmt::format("port {} held on {} before launch", h.master_port, host));
    }
  }

  void heal(Host& h, bool) override {
    pb::PortSquat req;
    req.set_port(h.master_port);
    req.set_hold(false);
    for (const int n : held) {
      try {
        const bool local = in_process(h, n);
        nlohmann::json d = {{"fault", "port_squat"}, {"port", h.master_port}};
        // A stopped or lost agent let the port go when it ended.
        if (local || (h.box.agents() && h.box.agents()->up(n))) on_node(h, n, req, "port_squat");
        if (!local) d.update({{"host", node_name(h, n)}, {"via", "agent"}});
        h.hist.harness("fault_healed", d);
      } catch (...) {
      }
    }
    held.clear();
  }
};

class PortSquatKind : public FaultKind {
 public:
  std::string key() const override { return "port_squat"; }
  std::vector<KeySpec> keys() const override {
    return {
        {"faults[].port_squat", KeyType::kBool, "false", "Hold the rendezvous port before launch"}};
  }
  std::unique_ptr<Fault> parse(const ParseContext&, const YAML::Node& item) const override {
    if (!item["port_squat"].as<bool>()) return nullptr;
    return std::make_unique<PortSquatFault>();
  }
  std::vector<const NodeHandler*> node_handlers() const override {
    static const NodeHandlerOf<pb::PortSquat> squat(&squat_on_node);
    return {&squat};
  }
};

}  // namespace

const FaultKind& port_squat_kind() {
  static const PortSquatKind k;
  return k;
}

}  // namespace fl::harness::faults
