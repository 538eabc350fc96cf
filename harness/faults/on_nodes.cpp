#include "harness/faults/on_nodes.hpp"

#include <google/protobuf/any.pb.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/faults/fault.hpp"
#include "harness/faults/node_handler.hpp"
#include "harness/faults/sandbox.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness::faults {

namespace fs = std::filesystem;

namespace {

// Is `pid` rank `rank` of the run in `run_dir`? Its environment carries the run's secret (and
// RANK), or its working directory is the rank's own (mpirun --wdir RUN_DIR/ranks/rankN).
bool is_rank_of_run(const std::string& run_dir, const std::string& host, const std::string& secret,
                    pid_t pid, int rank, std::string& why) {
  std::ifstream env(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  if (!env) {
    why = fmt::format("no process {} on host {}", pid, host);
    return false;
  }
  bool has_secret = false;
  std::string rank_var;
  for (std::string kv; std::getline(env, kv, '\0');) {
    if (kv == fmt::format("{}={}", kControlSecretEnv, secret)) has_secret = true;
    if (kv.rfind("RANK=", 0) == 0) rank_var = kv.substr(5);
  }
  if (has_secret && (rank_var.empty() || rank_var == std::to_string(rank))) return true;
  std::error_code ec;
  const auto cwd = fs::read_symlink(fmt::format("/proc/{}/cwd", pid), ec);
  const auto want = fs::weakly_canonical(fmt::format("{}/ranks/rank{}", run_dir, rank), ec);
  if (!cwd.empty() && cwd == want) return true;
  why = fmt::format(
      "process {} on host {} is not rank {} of this run (its environment has {} and it works in "
      "{}); not signalled",
      pid, host, rank, has_secret ? "RANK=" + rank_var : "not the run's secret",
      cwd.empty() ? std::string("?") : cwd.string());
  return false;
}

}  // namespace

Node::Node(std::string run_dir, std::string host, std::string secret, Sandbox* box)
    : dir_(std::move(run_dir)), host_(std::move(host)), secret_(std::move(secret)), box_(box) {}

Node::~Node() {
  cleanup();
}

nlohmann::json Node::apply(const google::protobuf::Any& request) {
  const std::string url = request.type_url();
  const std::string type = url.substr(url.rfind('/') + 1);
  const NodeHandler* h = node_handler(type);
  if (!h) {
    raise<Error>(
        "no fault kind handles the request '{}' on host {} (a request is one of the kinds' "
        "messages in faultline.proto: {})",
        url.empty() ? std::string("(none)") : url, host_, fmt::join(node_request_types(), ", "));
  }
  return h->apply(*this, request);
}

bool Node::signal_rank(int rank, pid_t pid, int sig, std::string& why) const {
  if (pid <= 1) {
    why = fmt::format("pid {} is not a rank's", pid);
    return false;
  }
  if (box_) {
    // This machine: the run's ranks are the harness's children (or, under a launcher, theirs).
    if (box_->supervisor().signal_descendant(pid, sig)) return true;
    why = fmt::format("process {} is not one of this run's on {} (or it is gone); not signalled",
                      pid, host_);
    return false;
  }
  if (!is_rank_of_run(dir_, host_, secret_, pid, rank, why)) return false;
  if (::kill(pid, sig) == 0) return true;
  why = fmt::format("kill({}, {}): {}", pid, sig, std::strerror(errno));
  return false;
}

std::string Node::run_net(int netns, const std::vector<std::string>& argv) const {
  if (argv.empty() || (argv[0] != "iptables" && argv[0] != "tc")) {
    raise<Error>("a node runs only iptables and tc for a network fault (asked: '{}')",
                 argv.empty() ? std::string() : argv[0]);
  }
  if (box_) return run_tool(box_->in_net(netns, argv));
  if (netns != -1) {
    raise<Error>("network: host {} has no simulated node namespaces (netns {}); refused", host_,
                 netns);
  }
  std::vector<std::string> bounded = {"timeout", "-k", "2", "20"};  // as the agent's tools
  bounded.insert(bounded.end(), argv.begin(), argv.end());
  return run_tool(bounded);
}

bool Node::place_at_spawn(int rank, const std::string& procs) {
  if (!box_) return false;  // an agent's host: the ranks are not this process's to start
  spawn_cgroups_.emplace(rank, procs);
  return true;
}

void Node::unplace(int rank, const std::string& procs) {
  const auto [from, to] = spawn_cgroups_.equal_range(rank);
  for (auto it = from; it != to; ++it) {
    if (it->second == procs) {
      spawn_cgroups_.erase(it);
      return;
    }
  }
}

std::vector<std::string> Node::spawn_cgroups(int rank) const {
  std::vector<std::string> procs;
  const auto [from, to] = spawn_cgroups_.equal_range(rank);
  for (auto it = from; it != to; ++it) procs.push_back(it->second);
  return procs;
}

std::vector<std::string> Node::cleanup() {
  // Each state undoes its own while it is still this node's (its handlers find it), newest first.
  std::vector<std::string> lines;
  for (size_t i = states_.size(); i-- > 0;) {
    for (auto& line : states_[i].second->cleanup()) lines.push_back(std::move(line));
  }
  states_.clear();
  return lines;
}

std::vector<std::string> Node::sweep_stale() {
  std::vector<std::string> lines;
  for (const auto* kind : fault_kinds()) {
    for (const auto* h : kind->node_handlers()) {
      for (auto& line : h->sweep_stale()) lines.push_back(std::move(line));
    }
  }
  return lines;
}

void unpack_request(const Node& n, const google::protobuf::Any& request,
                    google::protobuf::Message& into, const std::string& type) {
  if (!request.UnpackTo(&into)) {
    raise<Error>("{}: the request on host {} is not a {} ({})", request_name(type), n.host(), type,
                 request.type_url());
  }
}

const NodeHandler* node_handler(const std::string& type) {
  for (const auto* kind : fault_kinds()) {
    for (const auto* h : kind->node_handlers()) {
      if (h->type() == type) return h;
    }
  }
  return nullptr;
}

std::vector<std::string> node_request_types() {
  std::vector<std::string> types;
  for (const auto* kind : fault_kinds()) {
    for (const auto* h : kind->node_handlers()) types.push_back(h->type());
  }
  std::sort(types.begin(), types.end());
  return types;
}

std::string request_name(const std::string& type) {
  const std::string message = type.substr(type.find_last_of("./") + 1);
  std::string name;
  for (char c : message) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      if (!name.empty()) name += '_';
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      name += c;
    }
  }
  return name;
}

std::string run_path(const std::string& run_dir, const std::string& rel, const std::string& what) {
  if (rel.empty()) raise<Error>("{}: an empty path (give one relative to the run directory)", what);
  const fs::path p(rel);
  if (p.is_absolute()) {
    raise<Error>("{}: '{}' is absolute; the agent acts only inside the run directory {}", what, rel,
                 run_dir);
  }
  for (const auto& part : p) {
    if (part == "..") {
      raise<Error>("{}: '{}' leaves the run directory {} ('..'); refused", what, rel, run_dir);
    }
  }
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(run_dir, ec);
  const fs::path full = fs::weakly_canonical(base / p, ec);
  const std::string b = base.string() + "/", f = full.string();
  if (ec || f.size() <= b.size() || f.compare(0, b.size(), b) != 0) {
    raise<Error>("{}: '{}' resolves to {}, outside the run directory {}; refused", what, rel,
                 ec ? std::string("an unreadable path") : f, run_dir);
  }
  return f;
}

}  // namespace fl::harness::faults
