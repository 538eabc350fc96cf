// The Slurm executor's questions to Slurm and its preflight (docs/cluster.md#suites-as-a-slurm-job-
// array): nothing is submitted unless the client tools, the controller, the partition and every
// case's topology check out.
#include "harness/suite/slurm_cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "base/subprocess.hpp"
#include "harness/model/scenario.hpp"

namespace fl::harness::slurm {

namespace {

constexpr const char* kNothing = "; nothing was submitted";

bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');) {
    const std::string f = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(f.c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string first_line(const std::string& text) {
  std::string s = text.substr(0, text.find('\n'));
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

std::string get(const std::map<std::string, std::string>& r, const std::string& key) {
  auto it = r.find(key);
  return it == r.end() ? std::string() : it->second;
}

int to_int(const std::string& s, int fallback) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), ::isdigit)) return fallback;
  return std::atoi(s.c_str());
}

// The --set overrides the suite passes to every run (a case's topology depends on them).
std::vector<std::string> set_overrides(const std::vector<std::string>& run_args) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < run_args.size(); ++i) {
    if (run_args[i] == "--set") out.push_back(run_args[++i]);
  }
  return out;
}

}  // namespace

std::vector<std::map<std::string, std::string>> parse_records(const std::string& text) {
  static const std::regex key(R"(^[A-Za-z][A-Za-z0-9_:/]*=)");
  std::vector<std::map<std::string, std::string>> out;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::map<std::string, std::string> rec;
    std::string last;
    std::stringstream words(line);
    for (std::string w; words >> w;) {
      std::smatch m;
      if (std::regex_search(w, m, key)) {
        last = w.substr(0, m.length() - 1);
        rec[last] = w.substr(m.length());
      } else if (!last.empty()) {
        rec[last] += " " + w;  // a value with spaces (Command=, Reason=)
      }
    }
    if (!rec.empty()) out.push_back(std::move(rec));
  }
  return out;
}

std::vector<int> parse_index_set(const std::string& text) {
  static const std::regex item(R"((\d+)(?:-(\d+))?)");
  std::vector<int> out;
  const std::string set = text.substr(0, text.find('%'));  // "1-9%2": at most 2 at once
  std::stringstream ss(set);
  for (std::string part; std::getline(ss, part, ',');) {
    std::smatch m;
    if (!std::regex_match(part, m, item)) {
      throw Error(fmt::format("array task ids '{}': '{}' is not N or N-M", text, part));
    }
    const int a = std::stoi(m[1]), b = m[2].matched ? std::stoi(m[2]) : a;
    for (int i = a; i <= b && i - a < 1000000; ++i) out.push_back(i);
  }
  if (out.empty()) throw Error(fmt::format("array task ids '{}': empty", text));
  return out;
}

std::optional<long> parse_duration(const std::string& text) {
  if (text == "UNLIMITED" || text == "INFINITE") return -1;
  static const std::regex days(R"((\d+)-(\d+)(?::(\d+)(?::(\d+))?)?)");
  static const std::regex plain(R"((\d+)(?::(\d+)(?::(\d+))?)?)");
  std::smatch m;
  auto n = [&](int i) { return m[i].matched ? std::stol(m[i]) : 0L; };
  if (std::regex_match(text, m, days)) return n(1) * 86400 + n(2) * 3600 + n(3) * 60 + n(4);
  if (std::regex_match(text, m, plain)) {
    if (m[3].matched) return n(1) * 3600 + n(2) * 60 + n(3);  // hours:minutes:seconds
    return n(1) * 60 + n(2);                                  // minutes[:seconds]
  }
  return std::nullopt;
}

namespace {

using Record = std::map<std::string, std::string>;

// Slurm's client commands on PATH, and the controller answering.
void check_client() {
  for (const char* tool : {"sbatch", "scontrol", "scancel"}) {
    if (!on_path(tool)) {
      throw UsageError(fmt::format(
          "--executor slurm: no {} on PATH (Slurm's client commands; Debian: slurm-client){}", tool,
          kNothing));
    }
  }
  const auto ping = run_tool_status({"scontrol", "ping"});
  if (ping.status != 0 || ping.output.find(" is UP") == std::string::npos) {
    throw UsageError(fmt::format(
        "--executor slurm: the Slurm controller does not answer (scontrol ping, exit status {}: "
        "{}){}",
        ping.status, first_line(ping.output), kNothing));
  }
}

// --time-limit in seconds; -1 without one.
long time_limit_s(const std::string& time_limit) {
  if (time_limit.empty()) return -1;
  const auto t = parse_duration(time_limit);
  if (!t || *t <= 0) {
    throw UsageError(fmt::format(
        "--time-limit '{}': not a Slurm time (allowed: MINUTES, MINUTES:SECONDS, H:M:S, D-H, "
        "D-H:M, D-H:M:S)",
        time_limit));
  }
  return *t;
}

// The partition the suite asks for (--partition, else the cluster's default); it must be UP.
Record find_partition(const std::string& wanted) {
  const auto parts_out = run_tool_status({"scontrol", "show", "partition", "-o"});
  if (parts_out.status != 0) {
    throw UsageError(
        fmt::format("--executor slurm: scontrol show partition failed (exit status "
                    "{}: {}){}",
                    parts_out.status, first_line(parts_out.output), kNothing));
  }
  const auto parts = parse_records(parts_out.output);
  std::vector<std::string> names;
  const Record* part = nullptr;
  for (const auto& p : parts) {
    const std::string name = get(p, "PartitionName");
    if (name.empty()) continue;
    names.push_back(name);
    if (wanted.empty() ? get(p, "Default") == "YES" : name == wanted) part = &p;
  }
  const std::string known = names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
  if (part == nullptr) {
    if (!wanted.empty()) {
      throw UsageError(fmt::format("--partition '{}': no such partition (partitions: {}){}", wanted,
                                   known, kNothing));
    }
    throw UsageError(fmt::format(
        "--executor slurm: the cluster has no default partition; give --partition (partitions: "
        "{}){}",
        known, kNothing));
  }
  const std::string state = get(*part, "State");
  if (state != "UP") {
    throw UsageError(fmt::format("partition '{}' is {} (it takes no jobs){}",
                                 get(*part, "PartitionName"), state.empty() ? "in no state" : state,
                                 kNothing));
  }
  return *part;
}

// A partition's nodes and the most CPUs one of them has.
struct Capacity {
  int nodes = 0, max_cpus = 0;
};

Capacity capacity_of(const std::string& partition, const Record& part) {
  Capacity c;
  const auto nodes_out = run_tool_status({"scontrol", "show", "node", "-o"});
  if (nodes_out.status == 0) {
    for (const auto& n : parse_records(nodes_out.output)) {
      std::set<std::string> in;
      std::stringstream ss(get(n, "Partitions"));
      for (std::string p; std::getline(ss, p, ',');) in.insert(p);
      if (in.count(partition) == 0) continue;
      ++c.nodes;
      const std::string eff = get(n, "CPUEfctv");
      c.max_cpus = std::max(c.max_cpus, to_int(eff.empty() ? get(n, "CPUTot") : eff, 0));
    }
  }
  if (c.nodes == 0) {  // scontrol show node said nothing useful: the partition's totals
    c.nodes = to_int(get(part, "TotalNodes"), 0);
    const int total_cpus = to_int(get(part, "TotalCPUs"), 0);
    c.max_cpus = c.nodes > 0 ? total_cpus / c.nodes : 0;
  }
  return c;
}

// Every case, as its runs will load it, must fit the partition; its shape goes into `req`.
void fit_cases(const std::vector<SuiteCase>& cases, const SuiteOptions& o, const Record& part,
               const Capacity& cap, Request& req) {
  const int max_nodes = std::min(cap.nodes, to_int(get(part, "MaxNodes"), cap.nodes));
  const auto overrides = set_overrides(o.run_args);
  std::map<std::pair<std::string, bool>, Shape> seen;
  for (const auto& c : cases) {
    if (auto it = seen.find({c.scenario_file, c.fix}); it != seen.end()) {
      req.case_shapes.push_back(it->second);
      continue;
    }
    const Scenario s = load_scenario(c.scenario_file, LoadOptions{c.fix, overrides});
    const int nodes = s.topo.hosts.empty() ? 1 : static_cast<int>(s.topo.hosts.size());
    const int per_node = (s.topo.ranks + nodes - 1) / nodes;
    const std::string what = fmt::format("scenario '{}'{} ({}: topology.ranks {} on {} node{})",
                                         s.name, c.fix ? " [fix]" : "", c.scenario_file,
                                         s.topo.ranks, nodes, nodes == 1 ? "" : "s");
    if (nodes > max_nodes) {
      throw UsageError(fmt::format("{} needs {} nodes, but partition '{}' has {} (MaxNodes {}){}",
                                   what, nodes, req.partition, cap.nodes, get(part, "MaxNodes"),
                                   kNothing));
    }
    if (!o.slurm.overcommit && per_node > cap.max_cpus) {
      throw UsageError(fmt::format(
          "{} needs {} CPUs on a node (one a rank), but the largest node of partition '{}' has "
          "{} (--overcommit lets ranks share CPUs){}",
          what, per_node, req.partition, cap.max_cpus, kNothing));
    }
    req.nodes = std::max(req.nodes, nodes);
    req.tasks_per_node = std::max(req.tasks_per_node, per_node);
    seen[{c.scenario_file, c.fix}] = Shape{nodes, per_node};
    req.case_shapes.push_back(Shape{nodes, per_node});
  }
}

// The cluster's MaxArraySize (`fallback` when scontrol does not say).
int max_array_size(int fallback) {
  const auto config = run_tool_status({"scontrol", "show", "config"});
  std::smatch m;
  static const std::regex mas(R"(MaxArraySize\s*=\s*(\d+))");
  if (config.status == 0 && std::regex_search(config.output, m, mas)) return std::stoi(m[1]);
  return fallback;
}

}  // namespace

Request check_cluster(const std::vector<SuiteCase>& cases, const SuiteOptions& o) {
  check_client();
  Request req;
  req.time_limit_s = time_limit_s(o.slurm.time_limit);
  if (o.slurm.max_running < 0) throw UsageError("--jobs: must be at least 1");
  const Record part = find_partition(o.slurm.partition);
  req.partition = get(part, "PartitionName");
  const Capacity cap = capacity_of(req.partition, part);
  const auto max_time = parse_duration(get(part, "MaxTime"));
  if (req.time_limit_s > 0 && max_time && *max_time >= 0 && req.time_limit_s > *max_time) {
    throw UsageError(fmt::format("--time-limit {}: partition '{}' allows at most {} (MaxTime){}",
                                 o.slurm.time_limit, req.partition, get(part, "MaxTime"),
                                 kNothing));
  }
  fit_cases(cases, o, part, cap, req);
  req.max_array_size = max_array_size(req.max_array_size);
  if (static_cast<int>(cases.size()) > req.max_array_size) {
    throw UsageError(fmt::format(
        "--executor slurm: {} cases do not fit one job array (MaxArraySize {}); narrow the suite "
        "with --shard{}",
        cases.size(), req.max_array_size, kNothing));
  }
  return req;
}

bool is_terminal(const std::string& state) {
  static const std::set<std::string> done{"COMPLETED", "FAILED",       "TIMEOUT",      "CANCELLED",
                                          "NODE_FAIL", "PREEMPTED",    "BOOT_FAIL",    "DEADLINE",
                                          "REVOKED",   "SPECIAL_EXIT", "OUT_OF_MEMORY"};
  return done.count(state) > 0;
}

int wait_status(const std::string& exit_code) {
  const auto colon = exit_code.find(':');
  const int code = to_int(exit_code.substr(0, colon), 0);
  const int sig = colon == std::string::npos ? 0 : to_int(exit_code.substr(colon + 1), 0);
  if (sig > 0) return sig & 0x7f;  // WIFSIGNALED, WTERMSIG == sig
  return (code & 0xff) << 8;       // WIFEXITED, WEXITSTATUS == code
}

std::optional<std::map<int, TaskState>> query_array(const std::string& job_id) {
  std::map<int, TaskState> out;
  const auto sc = run_tool_status({"scontrol", "show", "job", "-o", job_id});
  if (sc.status == 0) {
    for (const auto& r : parse_records(sc.output)) {
      if (get(r, "ArrayJobId") != job_id) continue;
      const std::string ids = get(r, "ArrayTaskId");
      if (ids.empty()) continue;
      TaskState t;
      t.state = get(r, "JobState");
      t.exit_code = get(r, "ExitCode");
      t.reason = get(r, "Reason");
      t.node = get(r, "NodeList");
      if (t.node == "(null)") t.node.clear();
      t.run_s = static_cast<double>(parse_duration(get(r, "RunTime")).value_or(0));
      for (int i : parse_index_set(ids)) out[i] = t;
    }
    if (!out.empty()) return out;
  }
  // The controller forgot the job (MinJobAge): the accounting database, where there is one.
  const auto sa = run_tool_status(
      {"sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,ElapsedRaw,NodeList"});
  if (sa.status != 0) return std::nullopt;
  out = parse_sacct(job_id, sa.output);
  if (out.empty()) return std::nullopt;
  return out;
}

std::map<int, TaskState> parse_sacct(const std::string& job_id, const std::string& text) {
  std::map<int, TaskState> ranged, own;  // from combined records, from the tasks' own lines
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, '|');) f.push_back(x);
    if (f.size() < 5 || f[0].rfind(job_id + "_", 0) != 0) continue;
    std::string ids = f[0].substr(job_id.size() + 1);
    const bool range = !ids.empty() && ids.front() == '[';
    if (range) {
      if (ids.back() != ']') continue;
      ids = ids.substr(1, ids.size() - 2);
    } else if (ids.empty() || ids.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    TaskState t;
    t.state = f[1].substr(0, f[1].find(' '));  // "CANCELLED by 0"
    while (!t.state.empty() && t.state.back() == '+') t.state.pop_back();
    t.exit_code = f[2];
    t.run_s = to_int(f[3], 0);
    t.node = f[4] == "None assigned" ? "" : f[4];
    std::vector<int> idx;
    try {
      idx = parse_index_set(ids);
    } catch (const Error&) {
      continue;
    }
    for (int i : idx) (range ? ranged : own)[i] = t;
  }
  for (auto& [i, t] : own) ranged[i] = std::move(t);
  return ranged;
}

}  // namespace fl::harness::slurm
