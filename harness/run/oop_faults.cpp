#include "harness/run/oop_faults.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/counter_rng.hpp"
#include "base/error.hpp"
#include "base/settings.hpp"
#include "harness/run/history.hpp"
#include "harness/run/supervisor.hpp"

extern "C" char** environ;

namespace fl::harness {

namespace fs = std::filesystem;

FAULTLINE_SETTING(kCgroupRoot, std::string, "FAULTLINE_CGROUP_ROOT", "/sys/fs/cgroup/memory",
                  "cgroup v1 memory hierarchy where memory_limit faults create their groups");
FAULTLINE_SETTING(kPluginDir, std::string, "FAULTLINE_PLUGIN_DIR", "",
                  "Directory of the worker plugins (default: this build's)");

namespace {

constexpr const char* kSubnet = "10.200.0";  // each run has its own isolated hub: no clash

std::string node_ip(int node) {
  return fmt::format("{}.{}", kSubnet, node + 1);
}

std::string cgroup_prefix() {
  return "faultline.";
}

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

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (!out) raise<Error>("cannot write '{}' to {}: {}", text, path, std::strerror(errno));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

std::string run_tool(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) raise<Error>("pipe: {}", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    raise<Error>("cannot run {}: {}", argv[0], std::strerror(rc));
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    raise<Error>("`{}` failed ({}): {}", fmt::join(argv, " "),
                 WIFEXITED(st) ? fmt::format("exit {}", WEXITSTATUS(st))
                               : fmt::format("signal {}", WTERMSIG(st)),
                 text);
  }
  return text;
}

int sweep_stale_cgroups() {
  const std::string root = kCgroupRoot.get();
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(cgroup_prefix(), 0) != 0) continue;
    const pid_t owner = std::atoi(name.c_str() + cgroup_prefix().size());
    if (owner > 0 && (::kill(owner, 0) == 0 || errno == EPERM)) continue;  // its harness lives
    if (::rmdir(e.path().c_str()) == 0) ++removed;
  }
  return removed;
}

struct OutOfProcessFaults::Cgroup {
  std::string path;
  int64_t limit = 0;
  bool removed = false;
};

OutOfProcessFaults::OutOfProcessFaults(const Scenario& s, std::string run_dir, History& hist,
                                       Supervisor& sup)
    : s_(s), dir_(std::move(run_dir)), hist_(hist), sup_(sup), done_(s.oop_faults.size(), false) {}

OutOfProcessFaults::~OutOfProcessFaults() {
  heal(true);
}

pid_t OutOfProcessFaults::spawn_holder(const std::string& name,
                                       const std::vector<std::string>& unshare_args) {
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

std::vector<std::string> OutOfProcessFaults::in_net(int node, std::vector<std::string> argv) const {
  const pid_t holder = node < 0 ? hub_ : node_holders_.at(static_cast<size_t>(node));
  argv.insert(argv.begin(), {"nsenter", fmt::format("--net=/proc/{}/ns/net", holder)});
  return argv;
}

void OutOfProcessFaults::setup_namespaces() {
  const auto t0 = std::chrono::steady_clock::now();
  hub_ = spawn_holder("netns hub", {"--net"});
  wait_for_namespace(hub_, "net");
  run_tool(in_net(-1, {"ip", "link", "set", "lo", "up"}));
  run_tool(in_net(-1, {"ip", "link", "add", "br0", "type", "bridge"}));
  run_tool(in_net(-1, {"ip", "addr", "add", fmt::format("{}.254/24", kSubnet), "dev", "br0"}));
  run_tool(in_net(-1, {"ip", "link", "set", "br0", "up"}));
  for (int k = 0; k < s_.nodes; ++k) {
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
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> ips;
  for (int k = 0; k < s_.nodes; ++k) ips.push_back(node_ip(k));
  hist_.harness("network_setup", {{"nodes", s_.nodes},
                                  {"addresses", ips},
                                  {"bridge", fmt::format("{}.254", kSubnet)},
                                  {"setup_ms", ms}});
}

void OutOfProcessFaults::setup_mounts() {
  std::vector<const OutOfProcessFault*> disks;
  for (auto& f : s_.oop_faults) {
    if (f.kind == "disk_full") disks.push_back(&f);
  }
  if (disks.empty()) return;
  mount_holder_ = spawn_holder("mount namespace", {"--mount", "--propagation", "private"});
  wait_for_namespace(mount_holder_, "mnt");
  for (auto* f : disks) {
    const std::string path = dir_ + "/" + f->path;
    fs::create_directories(path);
    run_tool({"nsenter", fmt::format("--mount=/proc/{}/ns/mnt", mount_holder_), "mount", "-t",
              "tmpfs", "-o", fmt::format("size={},mode=0755", f->bytes), "faultline-disk-full",
              path});
    mounts_.push_back(path);
    hist_.harness("fault_injected",
                  {{"fault", "disk_full"}, {"path", f->path}, {"size_bytes", f->bytes}});
    injected_.push_back(fmt::format("{} is a {}-byte filesystem", f->path, f->bytes));
  }
}

void OutOfProcessFaults::setup_cgroups() {
  for (auto& f : s_.oop_faults) {
    if (f.kind != "memory_limit") continue;
    const std::string root = kCgroupRoot.get();
    if (::access((root + "/cgroup.procs").c_str(), W_OK) != 0) {
      raise<Error>(
          "memory_limit: the cgroup v1 memory hierarchy at {} is not writable ({}); set "
          "FAULTLINE_CGROUP_ROOT or run as root",
          root, std::strerror(errno));
    }
    auto cg = std::make_unique<Cgroup>();
    cg->path = fmt::format("{}/{}{}.{}.rank{}", root, cgroup_prefix(), ::getpid(),
                           fs::path(dir_).filename().string(), f.rank);
    cg->limit = f.bytes;
    if (::mkdir(cg->path.c_str(), 0755) != 0 && errno != EEXIST) {
      raise<Error>("memory_limit: cannot create cgroup {}: {}", cg->path, std::strerror(errno));
    }
    write_file(cg->path + "/memory.limit_in_bytes", std::to_string(f.bytes));
    // Without swap accounting the rank would swap instead of being killed.
    if (fs::exists(cg->path + "/memory.memsw.limit_in_bytes")) {
      write_file(cg->path + "/memory.memsw.limit_in_bytes", std::to_string(f.bytes));
    }
    std::ofstream(cg->path + "/memory.swappiness") << "0";
    hist_.harness("fault_injected",
                  {{"fault", "memory_limit"}, {"bytes", f.bytes}, {"cgroup", cg->path}}, f.rank);
    injected_.push_back(fmt::format("rank {} limited to {} bytes (cgroup)", f.rank, f.bytes));
    cgroups_[f.rank] = std::move(cg);
  }
}

void OutOfProcessFaults::setup_plugins() {
  bool any = false;
  for (auto& f : s_.oop_faults) any |= f.kind == "hide";
  if (!any) return;
  const std::string src = kPluginDir.get().empty() ? FAULTLINE_PLUGIN_BUILD_DIR : kPluginDir.get();
  std::vector<std::string> have;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(src, ec)) {
    if (e.is_regular_file()) have.push_back(e.path().filename().string());
  }
  std::sort(have.begin(), have.end());
  for (auto& f : s_.oop_faults) {
    if (f.kind == "hide" && std::find(have.begin(), have.end(), f.path) == have.end()) {
      raise<Error>("hide: no library '{}' in the plugin directory {} (there: {})", f.path, src,
                   have.empty() ? "nothing" : fmt::format("{}", fmt::join(have, ", ")));
    }
  }
  // Each rank loads plugins from its own directory of links; a hidden library has no link.
  for (int r = 0; r < s_.ranks; ++r) {
    const std::string d = fmt::format("{}/ranks/rank{}/plugins", dir_, r);
    fs::create_directories(d);
    for (auto& name : have) {
      bool hidden = false;
      for (auto& f : s_.oop_faults) {
        hidden |= f.kind == "hide" && f.path == name && (f.rank < 0 || f.rank == r);
      }
      if (hidden) {
        hist_.harness("fault_injected", {{"fault", "hide"}, {"library", name}, {"dir", d}}, r);
        injected_.push_back(fmt::format("{} hidden from rank {}", name, r));
        continue;
      }
      fs::create_symlink(fs::absolute(fs::path(src) / name), fs::path(d) / name);
    }
  }
}

void OutOfProcessFaults::prepare(int master_port) {
  master_port_ = master_port;
  if (const int n = sweep_stale_cgroups(); n > 0) {
    hist_.harness("cleanup", {{"stale_cgroups_removed", n}});
  }
  if (s_.network == "namespaces") setup_namespaces();
  setup_mounts();
  setup_cgroups();
  setup_plugins();
  for (size_t i = 0; i < s_.oop_faults.size(); ++i) {
    const auto& f = s_.oop_faults[i];
    if (f.kind == "port_squat" && squat_fd_ < 0) {
      if (uses_namespaces()) {
        raise<Error>("port_squat with network namespaces is not supported (squat on the host)");
      }
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(master_port_));
      if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 4) != 0) {
        const int e = errno;
        ::close(fd);
        raise<Error>("port_squat: cannot take port {}: {}", master_port_, std::strerror(e));
      }
      squat_fd_ = fd;
      hist_.harness("fault_injected", {{"fault", "port_squat"}, {"port", master_port_}});
      injected_.push_back(fmt::format("port {} held before launch", master_port_));
      done_[i] = true;
    } else if (f.kind == "env") {
      hist_.harness("fault_injected", {{"fault", "env"}, {"set", f.set}, {"unset", f.unset}},
                    f.rank);
      injected_.push_back(
          fmt::format("launch environment of {} changed",
                      f.rank < 0 ? "every rank" : "rank " + std::to_string(f.rank)));
      done_[i] = true;
    } else if (f.kind == "disk_full" || f.kind == "memory_limit" || f.kind == "hide") {
      done_[i] = true;
    } else if ((f.kind == "file" || f.kind == "network") && f.at == "launch") {
      apply(i, "launch");
    }
  }
}

std::string OutOfProcessFaults::master_addr() const {
  return uses_namespaces() ? node_ip(0) : "127.0.0.1";
}

void OutOfProcessFaults::adjust_rank(int rank, ProcessSpec& spec,
                                     std::map<std::string, std::string>& env) const {
  const int per_node = s_.ranks / s_.nodes;
  if (uses_namespaces()) {
    spec.namespaces.push_back(
        fmt::format("/proc/{}/ns/net", node_holders_.at(static_cast<size_t>(rank / per_node))));
    const std::string net = fmt::format("{}.0/24", kSubnet);
    env["OMPI_MCA_btl_tcp_if_include"] = net;
    env["OMPI_MCA_oob_tcp_if_include"] = net;
  }
  if (mount_holder_ != 0) spec.namespaces.push_back(fmt::format("/proc/{}/ns/mnt", mount_holder_));
  if (auto it = cgroups_.find(rank); it != cgroups_.end()) {
    spec.cgroup_procs = it->second->path + "/cgroup.procs";
  }
  const std::string plugins = fmt::format("{}/ranks/rank{}/plugins", dir_, rank);
  env["FAULTLINE_PLUGIN_PATH"] =
      fs::exists(plugins)
          ? plugins
          : (kPluginDir.get().empty() ? FAULTLINE_PLUGIN_BUILD_DIR : kPluginDir.get());
  env["FAULTLINE_JIT_DIR"] = dir_ + "/jit";
  for (auto& f : s_.oop_faults) {
    if (f.rank >= 0 && f.rank != rank) continue;
    if (f.kind == "args") {
      // This rank's launch command differs: its extra arguments come last and win.
      spec.argv.insert(spec.argv.end(), f.args.begin(), f.args.end());
    }
    if (f.kind != "env") continue;
    for (auto& [k, v] : f.set) env[k] = v;
    for (auto& k : f.unset) env.erase(k);
  }
}

void OutOfProcessFaults::adjust_helper(ProcessSpec& spec,
                                       std::map<std::string, std::string>& env) const {
  if (uses_namespaces()) {
    spec.namespaces.push_back(fmt::format("/proc/{}/ns/net", hub_));
    const std::string net = fmt::format("{}.0/24", kSubnet);
    env["OMPI_MCA_btl_tcp_if_include"] = net;
    env["OMPI_MCA_oob_tcp_if_include"] = net;
  }
  if (mount_holder_ != 0) spec.namespaces.push_back(fmt::format("/proc/{}/ns/mnt", mount_holder_));
}

void OutOfProcessFaults::inject_file(const OutOfProcessFault& f) {
  std::vector<std::string> hits;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir_, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string rel = fs::relative(it->path(), dir_).string();
    if (rel.rfind("tmp", 0) == 0 || rel.rfind(".faultline", 0) == 0) continue;
    if (it->is_regular_file() && !it->is_symlink() &&
        ::fnmatch(f.path.c_str(), rel.c_str(), FNM_PATHNAME) == 0) {
      hits.push_back(rel);
    }
  }
  std::sort(hits.begin(), hits.end());
  if (hits.empty()) raise<Error>("no file in the run directory matches '{}'", f.path);
  for (size_t h = 0; h < hits.size(); ++h) {
    const std::string path = dir_ + "/" + hits[h];
    const std::string backup = dir_ + "/.faultline/backup/" + hits[h];
    if (!backups_.count(path)) {
      fs::create_directories(fs::path(backup).parent_path());
      fs::copy_file(path, backup, fs::copy_options::overwrite_existing);
      backups_[path] = backup;
    }
    const auto size = static_cast<int64_t>(fs::file_size(path));
    nlohmann::json d = {{"fault", "file"}, {"action", f.action}, {"path", hits[h]}, {"size", size}};
    if (f.action == "delete") {
      fs::remove(path);
    } else if (f.action == "truncate") {
      const int64_t keep = std::max<int64_t>(0, size - f.bytes);
      fs::resize_file(path, static_cast<uintmax_t>(keep));
      d["new_size"] = keep;
    } else {
      // Deterministic in the scenario seed: the same bytes change in every run.
      std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
      std::vector<int64_t> offsets;
      for (int64_t b = 0; b < std::min(f.bytes, size); ++b) {
        const uint64_t r = rng::mix(s_.seed ^ rng::hash_name(hits[h]) ^ rng::mix(b));
        const auto off = static_cast<int64_t>(r % static_cast<uint64_t>(size));
        io.seekg(off);
        char c = 0;
        io.read(&c, 1);
        c = static_cast<char>(c ^ static_cast<char>(1 + (r >> 32) % 255));  // always changes
        io.seekp(off);
        io.write(&c, 1);
        if (offsets.size() < 16) offsets.push_back(off);
      }
      io.flush();
      d["bytes"] = std::min(f.bytes, size);
      d["first_offsets"] = offsets;
    }
    hist_.harness("fault_injected", d, f.rank);
    injected_.push_back(fmt::format("{} {}", f.action, hits[h]));
  }
}

void OutOfProcessFaults::inject_network(const OutOfProcessFault& f) {
  if (!uses_namespaces()) raise<Error>("network faults need topology.network: namespaces");
  nlohmann::json d = {{"fault", "network"}, {"action", f.action}, {"node", f.node}};
  if (f.action == "bandwidth") {
    run_tool(in_net(f.node, {"tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f.rate,
                             "burst", "32kbit", "latency", "400ms"}));
    shaped_.push_back(f.node);
    d["rate"] = f.rate;
    injected_.push_back(fmt::format("node {} limited to {}", f.node, f.rate));
  } else {
    // reject: TCP gets a reset (refused / reset by peer), anything else an ICMP error; drop:
    // packets vanish and only timeouts notice.
    auto rule = [&](const std::vector<std::string>& match) {
      const bool tcp_only = std::find(match.begin(), match.end(), "-p") != match.end();
      std::vector<std::string> r = {"iptables", "-A", "FAULTLINE"};
      r.insert(r.end(), match.begin(), match.end());
      if (f.action == "reject") {
        auto t = r;
        if (!tcp_only) t.insert(t.end(), {"-p", "tcp"});
        t.insert(t.end(), {"-j", "REJECT", "--reject-with", "tcp-reset"});
        run_tool(in_net(f.node, t));
        if (tcp_only) return;
        r.insert(r.end(), {"-j", "REJECT"});
      } else {
        r.insert(r.end(), {"-j", "DROP"});
      }
      run_tool(in_net(f.node, r));
    };
    std::vector<int> peers;
    if (f.store) {
      const std::string port = std::to_string(master_port_);
      rule({"-d", node_ip(0), "-p", "tcp", "--dport", port});
      if (f.node == 0)
        rule({"-s", node_ip(0), "-p", "tcp", "--sport", port, "!", "-d", node_ip(0)});
      d["store"] = fmt::format("{}:{}", node_ip(0), port);
      injected_.push_back(fmt::format("node {} cut from the store ({})", f.node, f.action));
    } else {
      for (int k = 0; k < s_.nodes; ++k) {
        if (k == f.node || (f.peer >= 0 && k != f.peer)) continue;
        rule({"-d", node_ip(k)});
        rule({"-s", node_ip(k)});
        peers.push_back(k);
      }
      d["peers"] = peers;
      injected_.push_back(
          fmt::format("node {} cut from node(s) {} ({})", f.node, fmt::join(peers, ","), f.action));
    }
    rules_in_.push_back(f.node);
  }
  hist_.harness("fault_injected", d);
}

bool OutOfProcessFaults::apply(size_t i, const std::string& when) {
  const auto& f = s_.oop_faults[i];
  done_[i] = true;
  try {
    if (f.kind == "file") {
      inject_file(f);
    } else if (f.kind == "network") {
      inject_network(f);
    }
    if (f.kind == "restart") {
      hist_.harness("fault_injected", {{"fault", "restart"}, {"when", when}});
      injected_.push_back(fmt::format("restart from the latest checkpoint ({})", when));
    }
  } catch (const Error& e) {
    // A fault that could not be injected is recorded, and the run goes on: the verdict shows it.
    hist_.harness("fault_failed", {{"fault", f.kind}, {"when", when}, {"error", e.what()}}, f.rank);
    injected_.push_back(fmt::format("{} fault failed: {}", f.kind, e.what()));
    return false;
  }
  return f.restart;
}

bool OutOfProcessFaults::on_progress(const std::map<int, int64_t>& max_step,
                                     const std::function<pid_t(int)>& pid_of,
                                     const std::function<bool(int)>& is_local_child) {
  bool restart = false;
  for (size_t i = 0; i < s_.oop_faults.size(); ++i) {
    const auto& f = s_.oop_faults[i];
    if (done_[i] || f.at != "step") continue;
    if (f.kind != "signal" && f.kind != "file" && f.kind != "network" && f.kind != "restart") {
      continue;
    }
    const int watch = f.rank >= 0 ? f.rank : 0;
    auto it = max_step.find(watch);
    if (it == max_step.end() || it->second < f.step) continue;
    if (f.kind != "signal") {
      restart |= apply(i, "step");
      continue;
    }
    const pid_t pid = pid_of(f.rank);
    if (pid == 0) continue;
    done_[i] = true;
    const int sig = signal_number(f.signal);
    const bool ok =
        is_local_child(f.rank) ? sup_.signal(pid, sig) : sup_.signal_descendant(pid, sig);
    hist_.harness("fault_injected",
                  {{"fault", "signal"},
                   {"signal", "SIG" + f.signal},
                   {"pid", pid},
                   {"at_step", it->second},
                   {"delivered", ok}},
                  f.rank);
    injected_.push_back(fmt::format("SIG{} to rank {} at step {}", f.signal, f.rank, it->second));
  }
  return restart;
}

bool OutOfProcessFaults::on_all_exited() {
  bool restart = false;
  for (size_t i = 0; i < s_.oop_faults.size(); ++i) {
    const auto& k = s_.oop_faults[i].kind;
    if (!done_[i] && s_.oop_faults[i].at == "exit" &&
        (k == "file" || k == "network" || k == "restart")) {
      restart |= apply(i, "exit");
    }
  }
  return restart;
}

void OutOfProcessFaults::on_rank_exit(int rank) {
  auto it = cgroups_.find(rank);
  if (it == cgroups_.end()) return;
  const std::string oom = read_text(it->second->path + "/memory.oom_control");
  int64_t kills = 0;
  if (auto p = oom.find("oom_kill "); p != std::string::npos) {
    kills = std::atoll(oom.c_str() + p + 9);
  }
  const int64_t peak =
      std::atoll(read_text(it->second->path + "/memory.max_usage_in_bytes").c_str());
  const int64_t failcnt = std::atoll(read_text(it->second->path + "/memory.failcnt").c_str());
  hist_.harness("cgroup_memory",
                {{"limit", it->second->limit},
                 {"max_usage", peak},
                 {"failcnt", failcnt},
                 {"oom_kills", kills}},
                rank);
  if (kills > 0) hist_.harness("oom_kill", {{"kills", kills}, {"cgroup", it->second->path}}, rank);
}

void OutOfProcessFaults::heal(bool processes_gone) {
  auto quietly = [&](const char* what, auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      try {
        hist_.harness("heal_error", {{"fault", what}, {"error", e.what()}});
      } catch (...) {
      }
    }
  };
  if (!healed_) {
    healed_ = true;
    if (squat_fd_ >= 0) {
      ::close(squat_fd_);
      squat_fd_ = -1;
      quietly("port_squat", [&] {
        hist_.harness("fault_healed", {{"fault", "port_squat"}, {"port", master_port_}});
      });
    }
    for (int node : rules_in_) {
      quietly("network", [&] {
        run_tool(in_net(node, {"iptables", "-F", "FAULTLINE"}));
        hist_.harness("fault_healed", {{"fault", "network"}, {"node", node}});
      });
    }
    rules_in_.clear();
    for (int node : shaped_) {
      quietly("bandwidth", [&] {
        run_tool(in_net(node, {"tc", "qdisc", "del", "dev", "eth0", "root"}));
        hist_.harness("fault_healed", {{"fault", "bandwidth"}, {"node", node}});
      });
    }
    shaped_.clear();
    for (auto& m : mounts_) {
      quietly("disk_full", [&] {
        run_tool(
            {"nsenter", fmt::format("--mount=/proc/{}/ns/mnt", mount_holder_), "umount", "-l", m});
        hist_.harness("fault_healed", {{"fault", "disk_full"}, {"path", m}});
      });
    }
    mounts_.clear();
    for (auto& [path, backup] : backups_) {
      quietly("file", [&] {
        fs::copy_file(backup, path, fs::copy_options::overwrite_existing);
        hist_.harness("fault_healed",
                      {{"fault", "file"}, {"path", fs::relative(path, dir_).string()}});
      });
    }
    backups_.clear();
    std::error_code ec;
    fs::remove_all(dir_ + "/.faultline", ec);
  }
  if (!processes_gone) return;
  for (auto& [rank, cg] : cgroups_) {
    if (cg->removed) continue;
    quietly("memory_limit", [&] {
      for (int i = 0; i < 100 && ::rmdir(cg->path.c_str()) != 0 && errno == EBUSY; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      cg->removed = !fs::exists(cg->path);
      hist_.harness("fault_healed",
                    {{"fault", "memory_limit"}, {"cgroup", cg->path}, {"removed", cg->removed}},
                    rank);
    });
  }
  // Namespaces end with their holders (killed with the run's processes).
  std::vector<pid_t> holders = node_holders_;
  if (hub_) holders.push_back(hub_);
  if (mount_holder_) holders.push_back(mount_holder_);
  if (!holders.empty()) {
    int alive = 0;
    for (pid_t p : holders) alive += fs::exists(fmt::format("/proc/{}/ns", p)) ? 1 : 0;
    quietly("namespaces", [&] {
      hist_.harness("fault_healed", {{"fault", "namespaces"}, {"holders_left", alive}});
    });
    node_holders_.clear();
    hub_ = mount_holder_ = 0;
  }
}

}  // namespace fl::harness
