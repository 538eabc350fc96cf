// port_squat: another process holds the rendezvous port before launch (a stale job, a second
// job on the node): the store cannot bind it.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "base/error.hpp"
#include "harness/faults/agent_nodes.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/history/history.hpp"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // key tables leave ranges out

namespace fl::harness::faults {
namespace {

class PortSquatFault : public FaultOf<PortSquatFault> {
 public:
  int fd = -1;
  // Through agents: held by host 0's agent, where rank 0's store binds; with launcher srun and no
  // hosts by every node's (rank 0's node is Slurm's choice).
  std::vector<int> held;
  nlohmann::json params() const override { return nlohmann::json::object(); }
  void setup(Host& h) override {
    if (const auto nodes = fault_nodes(h, 0); !nodes.empty()) {
      for (const int n : nodes) {
        const std::string host = node_name(h, n);
        agent_for(h, n, "port_squat").squat(n, h.master_port, true);
        held.push_back(n);
        h.record("port_squat", {{"port", h.master_port}, {"host", host}, {"via", "agent"}}, -1,
                 fmt::format("port {} held on {} before launch", h.master_port, host));
      }
      return;
    }
    if (h.box.has_network()) {
      raise<Error>("port_squat with network namespaces is not supported (squat on the host)");
    }
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(h.master_port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 4) != 0) {
      const int e = errno;
      ::close(fd);
      fd = -1;
      raise<Error>("port_squat: cannot take port {}: {}", h.master_port, std::strerror(e));
    }
    h.record("port_squat", {{"port", h.master_port}}, -1,
             fmt::format("port {} held before launch", h.master_port));
  }
  void heal(Host& h, bool) override {
    for (const int n : held) {
      try {
        // A stopped or lost agent let the port go when it ended.
        if (h.box.agents() && h.box.agents()->up(n)) h.box.agents()->squat(n, h.master_port, false);
        h.hist.harness("fault_healed", {{"fault", "port_squat"},
                                        {"port", h.master_port},
                                        {"host", node_name(h, n)},
                                        {"via", "agent"}});
      } catch (...) {
      }
    }
    held.clear();
    if (fd < 0) return;
    ::close(fd);
    fd = -1;
    try {
      h.hist.harness("fault_healed", {{"fault", "port_squat"}, {"port", h.master_port}});
    } catch (...) {
    }
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
};

}  // namespace

const FaultKind& port_squat_kind() {
  static const PortSquatKind k;
  return k;
}

}  // namespace fl::harness::faults
