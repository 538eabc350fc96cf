#include "harness/launch/slurm_alloc.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/launch/mpi_tuning.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness {

namespace {

bool on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string d = dirs.substr(start, end - start);
    if (!d.empty() && ::access((d + "/" + prog).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// What slurmstepd makes of a multi-program word for task `rank`, `offset` into its line's range.
std::string expand(std::string w, int rank, int offset) {
  for (auto [key, value] : {std::pair{"%t", rank}, std::pair{"%o", offset}}) {
    for (auto at = w.find(key); at != std::string::npos; at = w.find(key, at)) {
      w.replace(at, 2, std::to_string(value));
    }
  }
  return w;
}

// Word `w` of the first rank `r` of a range with a number written as `key` (%t: r itself; %o: the
// offset, 0 here): the whole word, a VAR=number's value; with %t also "rank<r>" anywhere (the
// rank's directory and files).
std::string word_template(std::string w, int r, const char* key) {
  const std::string n = key == std::string("%t") ? std::to_string(r) : "0";
  if (w == n) return key;
  if (const auto eq = w.find('='); eq != std::string::npos && w.substr(eq + 1) == n) {
    return w.substr(0, eq + 1) + key;
  }
  const std::string dir = "rank" + std::to_string(r);
  for (auto at = w.find(dir); at != std::string::npos; at = w.find(dir, at + 6)) {
    w.replace(at, dir.size(), "rank%t");
  }
  return w;
}

// One line for ranks first.. : each word where rank `first` and `first + 1` differ written with
// %t or %o so that it gives both; empty when no such line exists.
std::vector<std::string> range_template(const std::vector<std::string>& a,
                                        const std::vector<std::string>& b, int first) {
  if (a.size() != b.size()) return {};
  std::vector<std::string> out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) {
      out.push_back(a[i]);
      continue;
    }
    const std::string t = word_template(a[i], first, "%t"), o = word_template(a[i], first, "%o");
    if (expand(t, first + 1, 1) == b[i]) {
      out.push_back(t);
    } else if (expand(o, first + 1, 1) == b[i]) {
      out.push_back(o);
    } else {
      return {};
    }
  }
  return out;
}

bool gives(const std::vector<std::string>& tmpl, const std::vector<std::string>& words, int rank,
           int offset) {
  if (tmpl.size() != words.size()) return false;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (expand(tmpl[i], rank, offset) != words[i]) return false;
  }
  return true;
}

// A '%' in rank r's command: slurmstepd would replace %t and %o in it.
void refuse_percent(const std::string& line, int r) {
  const auto pct = line.find('%');
  if (pct == std::string::npos) return;
  raise<Error>(
      "launcher srun: rank {}'s command has a '%' ('{}'): slurmstepd replaces %t and %o in a "
      "multi-program file (allowed: no '%' in the scenario's env, args and paths, or launcher: "
      "mpirun)",
      r, line.substr(pct >= 40 ? pct - 40 : 0, 80));
}

// What slurmstepd reads of one multi-program line (srun/multi_prog.c: its buffer and argv):
// `prog` the words after the task column, `chars` the whole line's length.
void check_line_size(const std::string& prog, size_t chars, int r) {
  constexpr size_t kMaxWords = 127, kMaxChars = 16382;
  const auto words = static_cast<size_t>(std::count(prog.begin(), prog.end(), ' ') + 1);
  if (words <= kMaxWords && chars <= kMaxChars) return;
  raise<Error>(
      "launcher srun: rank {}'s command has {} words and its line {} characters; srun's "
      "multi-program file takes at most {} words and {} characters a line (allowed: fewer env "
      "variables, or launcher: mpirun)",
      r, words, chars, kMaxWords, kMaxChars);
}

}  // namespace

std::string srun_multi_prog(const std::vector<std::string>& lines) {
  constexpr size_t kMaxFile = 60000;  // srun's limit (srun/launch.c, _load_multi)
  std::vector<std::vector<std::string>> words;
  for (size_t r = 0; r < lines.size(); ++r) {
    refuse_percent(lines[r], static_cast<int>(r));
    words.push_back(words_of(lines[r]));
  }
  std::string file;
  for (size_t first = 0; first < lines.size();) {
    const int r0 = static_cast<int>(first);
    size_t last = first;
    std::string prog = lines[first];
    if (first + 1 < lines.size()) {
      const auto tmpl = range_template(words[first], words[first + 1], r0);
      while (!tmpl.empty() && last + 1 < lines.size() &&
             gives(tmpl, words[last + 1], static_cast<int>(last + 1),
                   static_cast<int>(last + 1 - first))) {
        ++last;
      }
      if (last > first) prog = fmt::format("{}", fmt::join(tmpl, " "));
    }
    const std::string range =
        first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
    check_line_size(prog, range.size() + 1 + prog.size(), r0);
    file += range + " " + prog + "\n";
    first = last + 1;
  }
  if (file.size() > kMaxFile) {
    raise<Error>(
        "launcher srun: the multi-program file for {} ranks has {} bytes and srun takes at most "
        "{} (the ranks' commands differ in more than their rank; allowed: fewer env variables "
        "or rank_env entries, or launcher: mpirun)",
        lines.size(), file.size(), kMaxFile);
  }
  return file;
}

std::vector<std::string> SlurmAllocation::agent_names() const {
  return hosts.empty() ? nodes : hosts;
}

std::vector<std::string> SlurmAllocation::agent_nodes() const {
  return host_nodes.empty() ? nodes : host_nodes;
}

std::map<std::string, std::string> SlurmAllocation::mapping() const {
  std::map<std::string, std::string> m;
  for (size_t k = 0; k < hosts.size() && k < host_nodes.size(); ++k) m[hosts[k]] = host_nodes[k];
  return m;
}

std::vector<std::string> expand_nodelist(const std::string& list) {
  const ToolOutcome out = run_tool_status({"scontrol", "show", "hostnames", list});
  std::vector<std::string> nodes;
  std::istringstream in(out.output);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) nodes.push_back(line);
  }
  if (out.status != 0 || nodes.empty()) {
    raise<Error>(
        "launcher srun: `scontrol show hostnames {}` did not name the allocation's nodes (exit "
        "status {}: {})",
        list, out.status, out.output.substr(0, 300));
  }
  return nodes;
}

std::vector<std::string> map_hosts_to_nodes(const std::vector<std::string>& hosts,
                                            const std::vector<std::string>& nodes) {
  if (nodes.size() < hosts.size()) {
    raise<Error>(
        "launcher srun: topology.hosts lists {} host(s) but the allocation has {} node(s) ({}); "
        "each host needs a node of its own (allowed: an allocation of at least {} nodes, e.g. "
        "sbatch -N {}); nothing was launched",
        hosts.size(), nodes.size(), fmt::join(nodes, ","), hosts.size(), hosts.size());
  }
  return {nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(hosts.size())};
}

std::string node_address(const std::string& node) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(node.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    raise<Error>(
        "launcher srun: node {} (host 0's) does not resolve to an IPv4 address ({}); give "
        "topology.hosts as NAME=ADDRESS",
        node, rc != 0 ? ::gai_strerror(rc) : "no address");
  }
  char buf[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  ::freeaddrinfo(res);
  return buf;
}

SlurmAllocation check_srun_allocation(const Scenario& s) {
  for (const char* prog : {"srun", "scontrol"}) {
    if (!on_path(prog)) {
      raise<Error>(
          "launcher srun: no {} on PATH (Slurm is not installed here; allowed: run faultline "
          "inside a Slurm allocation, or topology.launcher: mpirun); nothing was launched",
          prog);
    }
  }
  SlurmAllocation a;
  a.job = env_or("SLURM_JOB_ID");
  if (a.job.empty()) {
    raise<Error>(
        "launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not set; run faultline "
        "in sbatch or salloc, docs/cluster.md); nothing was launched");
  }
  const std::string list = env_or("SLURM_JOB_NODELIST", env_or("SLURM_NODELIST"));
  if (list.empty()) {
    raise<Error>(
        "launcher srun: job {} has no node list (SLURM_JOB_NODELIST is not set); nothing was "
        "launched",
        a.job);
  }
  if (const std::string n = env_or("SLURM_NTASKS"); !n.empty()) {
    const int tasks = std::atoi(n.c_str());
    if (tasks < s.topo.ranks) {
      raise<Error>(
          "launcher srun: the allocation has {} task(s) (SLURM_NTASKS) but topology.ranks is "
          "{} (allowed: an allocation of at least {} tasks, e.g. sbatch -n {}); nothing was "
          "launched",
          tasks, s.topo.ranks, s.topo.ranks, s.topo.ranks);
    }
  }
  a.nodes = expand_nodelist(list);
  if (!s.topo.hosts.empty()) {
    a.hosts = s.topo.hosts;
    a.host_nodes = map_hosts_to_nodes(s.topo.hosts, a.nodes);
  }
  return a;
}

std::vector<std::pair<std::string, std::string>> srun_mpi_env(const Scenario& s,
                                                              const SlurmAllocation& a, int cpus) {
  std::vector<std::pair<std::string, std::string>> out;
  if (s.topo.backend != "mpi") return out;
  if (a.nodes.size() == 1) {  // local_mpi_params and local_mpi_env are empty with hosts
    for (const auto& [name, value] : local_mpi_params(s)) {
      out.emplace_back("OMPI_MCA_" + name, value);
    }
    for (const auto& kv : local_mpi_env(s)) out.push_back(kv);
  }
  const size_t nodes = std::max<size_t>(1, a.hosts.empty() ? a.nodes.size() : a.hosts.size());
  const size_t per_node = (static_cast<size_t>(s.topo.ranks) + nodes - 1) / nodes;
  const std::string yield = "OMPI_MCA_mpi_yield_when_idle";
  if (per_node > static_cast<size_t>(std::max(cpus, 1)) && !s.env.sets(yield)) {
    out.emplace_back(yield, "1");
  }
  return out;
}

std::optional<SlurmAllocation> mpirun_allocation(const Scenario& s) {
  if (s.topo.launcher != "mpirun" || s.topo.hosts.empty() || !s.topo.rsh_agent.empty()) {
    return std::nullopt;
  }
  SlurmAllocation a;
  a.job = env_or("SLURM_JOB_ID");
  const std::string list = env_or("SLURM_JOB_NODELIST", env_or("SLURM_NODELIST"));
  if (a.job.empty() || list.empty() || !on_path("srun") || !on_path("scontrol")) {
    return std::nullopt;
  }
  a.nodes = expand_nodelist(list);
  for (const auto& h : s.topo.hosts) {
    if (std::find(a.nodes.begin(), a.nodes.end(), h) == a.nodes.end()) return std::nullopt;
  }
  a.hosts = s.topo.hosts;
  a.host_nodes = s.topo.hosts;  // each host is its own node
  return a;
}

}  // namespace fl::harness
