// A fault kind's handler of its typed request (on_nodes.hpp), made from a function of the node and
// the request. The kind's file defines the function next to the fault and lists the handler in
// its FaultKind::node_handlers(), so registering the kind registers what it does on the nodes.
#pragma once

#include <string>
#include <vector>

#include "harness/faults/on_nodes.hpp"

namespace google::protobuf {
class Message;
}

namespace fl::harness::faults {

// Unpacks `request` into `into` (a message of type `type`), or Error naming the request, the host
// and what came instead (on_nodes.cpp: this header stays free of protobuf).
void unpack_request(const Node& n, const google::protobuf::Any& request,
                    google::protobuf::Message& into, const std::string& type);

template <class Request>
class NodeHandlerOf : public NodeHandler {
 public:
  using Apply = nlohmann::json (*)(Node&, const Request&);
  using Sweep = std::vector<std::string> (*)();
  explicit NodeHandlerOf(Apply fn, Sweep sweep = nullptr) : apply_(fn), sweep_(sweep) {}

  std::string type() const override { return std::string(Request::descriptor()->full_name()); }
  nlohmann::json apply(Node& n, const google::protobuf::Any& request) const override {
    Request r;
    unpack_request(n, request, r, type());
    return apply_(n, r);
  }
  std::vector<std::string> sweep_stale() const override {
    return sweep_ ? sweep_() : std::vector<std::string>{};
  }

 private:
  Apply apply_;
  Sweep sweep_;
};

}  // namespace fl::harness::faults
