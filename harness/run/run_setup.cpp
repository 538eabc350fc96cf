// Before any rank starts: the run directory (created exclusively), the resolved scenario and plan
// files, each rank's environment, the control plane and the artifact hub.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/agent/hub.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/placement.hpp"
#include "harness/model/tokenizer_files.hpp"
#include "harness/run/artifact_server.hpp"
#include "harness/run/run.hpp"
#include "harness/run/run_agents.hpp"
#include "harness/run/watchdogs.hpp"

namespace fl::harness::detail {

namespace fs = std::filesystem;

void Run::prepare() {
  // Created exclusively, so two runs started at once never share one: a generated id is drawn
  // again, a given one (--run-id) is an error; either is one path component under --results,
  // which no other user may be able to write (unless --allow-shared-results). The directory is
  // opened once; everything the harness writes into it goes through that descriptor.
  auto made = make_run_dir(o_.results_dir, o_.run_id, s_.name, o_.allow_shared_results);
  id_ = made.id;
  dir_ = made.dir;
  run_dir_ = std::move(made.fd);
  if (!made.warning.empty()) {
    std::fprintf(stderr, "faultline: warning: accepted with --allow-shared-results: %s\n",
                 made.warning.c_str());
  }
  // Only the harness's user enters the run directory (it holds the control socket and secret)
  // unless the user shares it; the secret and the socket stay 0600 either way.
  if (::fchmod(run_dir_.fd(), o_.shared_run_dir ? 0755 : 0700) != 0) {
    raise<Error>("{}: cannot set the run directory's mode: {}", dir_, strerror(errno));
  }
  run_dir_.mkdirs("tmp");
  for (int r = 0; r < s_.topo.ranks; ++r) run_dir_.mkdirs(fmt::format("ranks/rank{}", r));
  if (uses_tokenizer(s_)) {
    // What the data's preprocessing left beside it (workload.tokenizer names files in here).
    run_dir_.mkdirs("tokenizer");
    for (const auto& [name, text] : tokenizer_files(preset_vocab(s_.workload.model)))
      run_dir_.write_atomic("tokenizer/" + name, text);
  }
  YAML::Emitter em;
  em << s_.resolved;
  run_dir_.write_atomic("scenario.yaml", std::string(em.c_str()) + "\n");
  std::string plan;
  for (auto& p : s_.faults.plans) plan += p + "\n";
  run_dir_.write_atomic("fault-plan.txt", plan);
  run_dir_.write_atomic(
      "verdict.json", nlohmann::json{{"outcome", "unknown"}, {"state", "running"}}.dump(2) + "\n");
  hist_ = std::make_unique<History>(
      run_dir_.open_file("history.jsonl", O_WRONLY | O_APPEND | O_CREAT | O_EXCL),
      dir_ + "/history.jsonl");
  if (!made.warning.empty()) hist_->harness("shared_results", {{"warning", made.warning}});
  watch_ = std::make_unique<Watchdogs>(s_, *hist_);  // the hang watchdog's summary, from here on
}

std::map<std::string, std::string> Run::rank_env(int rank) {
  auto env = base_env();
  // The rank's node as the launchers place it (placement.hpp).
  const int per_node = ranks_per_node(s_.topo.ranks, s_.topo.nodes);
  const int node = node_of_rank(s_.topo, rank);
  const std::string rdir = fmt::format("{}/ranks/rank{}", dir_, rank);
  env["RANK"] = std::to_string(rank);
  env["WORLD_SIZE"] = std::to_string(s_.topo.ranks);
  env["LOCAL_RANK"] = std::to_string(rank - node * per_node);
  env["LOCAL_WORLD_SIZE"] = std::to_string(per_node);
  env["NODE_RANK"] = std::to_string(node);
  env["MASTER_ADDR"] = faults_->master_addr();
  env["MASTER_PORT"] = std::to_string(master_port_);
  env["FAULTLINE_RUN_ID"] = id_;
  env["FAULTLINE_BACKEND"] = s_.topo.backend;
  env["FAULTLINE_LOG_FIDELITY"] = s_.workload.fidelity;
  env["FAULTLINE_COMM_TIMEOUT_MS"] = std::to_string(s_.timeouts.comm_ms);
  env["FAULTLINE_RDZV_TIMEOUT_MS"] = std::to_string(s_.timeouts.rendezvous_ms);
  env["FAULTLINE_EVENTS_FILE"] = rdir + "/events.jsonl";
  env["FAULTLINE_FIRED_LOG"] = rdir + "/fired.jsonl";
  env["FAULTLINE_FLIGHT_RECORDER_DIR"] = rdir;
  // The control plane, or with topology.hosts the rank's host's agent, which relays (relay.hpp).
  env["FAULTLINE_CONTROL_ADDR"] = agents_->rank_control_addr(node, ctl_addr_);
  env[kControlSecretEnv] = secret_;
  env["FAULTLINE_PDEATHSIG"] = "1";
  if (artifacts_) {
    env["FAULTLINE_ARTIFACT_URL"] = artifact_url_;
    env["FAULTLINE_ARTIFACT_CACHE"] = fmt::format("{}/artifacts/node{}", dir_, node);
  }
  env["TMPDIR"] = dir_ + "/tmp";
  // Open MPI's shared-memory segments go into the run's tmp (not /dev/shm), so a harness killed
  // with its ranks leaves none behind outside the run directory (docs/harness.md).
  env["OMPI_MCA_btl_vader_backing_directory"] = dir_ + "/tmp";
  env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
  env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  // On one machine MPI's TCP paths stay on loopback: another run's bridge or link (a hosts test's
  // 10.201.X.254, a namespace hub) that comes and goes must never be one of this run's addresses.
  // Network namespaces set their own subnet over this (Sandbox::adjust_rank).
  if (s_.topo.hosts.empty() && launcher_->kind() != LauncherKind::kSrun) {
    env["OMPI_MCA_btl_tcp_if_include"] = "lo";
    env["OMPI_MCA_oob_tcp_if_include"] = "lo";
  }
  if (!s_.faults.plans.empty()) {
    std::string joined;
    for (auto& p : s_.faults.plans) joined += (joined.empty() ? "" : ";") + p;
    env["FAULTLINE_FAULTS"] = joined;
    env["FAULTLINE_FAULT_SEED"] = std::to_string(s_.seed);
  }
  // torchrun's default since pytorch PR 22501: one OpenMP (and so OpenBLAS) thread per rank when
  // a node runs several, unless the environment says otherwise. Without it every rank's BLAS
  // starts a thread per core, and ranks sharing a node oversubscribe it (pytorch#22260).
  // The harness is torchrun's stand-in where it starts each rank itself: the local launcher and
  // a command started per rank (a command launched once is the launcher and decides).
  const bool starts_ranks =
      launcher_->kind() == LauncherKind::kLocal ||
      (launcher_->kind() == LauncherKind::kCommand && s_.workload.launch == "per_rank");
  if (starts_ranks && s_.topo.omp_num_threads == "auto" && per_node > 1 &&
      !env.count("OMP_NUM_THREADS")) {
    env["OMP_NUM_THREADS"] = "1";
  }
  launcher_->add_env(rank, env);
  for (auto& [k, v] : s_.env.all) env[k] = v;
  if (auto it = s_.env.per_rank.find(rank); it != s_.env.per_rank.end()) {
    for (auto& [k, v] : it->second) env[k] = v;
  }
  return env;
}

// The control plane: a fresh secret in RUN_DIR/control.secret (0600) and, unless --control
// names another address, a unix socket RUN_DIR/control.sock (0600). When that path is too long for
// a unix socket, the socket is bound through a short private link to the run directory
// (/tmp/faultline-control-XXXXXX/run/control.sock, ShortLinkDir): it still lands in RUN_DIR with
// control.secret beside it. Before stop 72 such a run fell back to loopback TCP, which every user
// of the machine can reach and ranks in network namespaces cannot (those runs were refused: a
// triage draft from a namespaces base under results/runs had a path of about 130 bytes).
void Run::start_control_plane() {
  secret_ = make_control_secret();
  run_dir_.write_new(kControlSecretFile, secret_ + "\n", 0600);
  ctl_ = std::make_unique<Controller>(
      *hist_, [this](const ControlAction& a) { return control(a); }, secret_);
  std::string addr = o_.control_addr;
  if (addr.empty()) {
    std::string sock = dir_ + "/control.sock";
    if (sock.size() > kUnixSocketPathMax) {
      ctl_link_ = ShortLinkDir("faultline-control-", "run", dir_);
      sock = ctl_link_.path() + "/control.sock";
    }
    addr = "unix:" + sock;
  }
  check_control_reach(s_, addr);    // beyond loopback only for hosts (agent/hub.hpp)
  agents_->attach(*ctl_, secret_);  // launcher srun or topology.hosts (run_agents.hpp)
  if (s_.topo.network == "namespaces" && addr.rfind("unix:", 0) != 0) {
    raise<Error>(
        "--control {}: ranks in network namespaces reach the control plane only through a unix "
        "socket (unix:PATH)",
        addr);
  }
  ctl_addr_ = ctl_->start(addr);
}

// The run's hub serves what the model's data pipeline needs (its tokenizer's vocabulary).
void Run::start_artifact_hub() {
  if (s_.topo.network == "namespaces") {
    raise<Error>(
        "workload.fetch needs topology.network: host (ranks in network namespaces cannot reach "
        "the harness's hub on 127.0.0.1)");
  }
  const std::string hub = dir_ + "/hub";
  run_dir_.mkdirs("hub");
  const int vocab = preset_vocab(s_.workload.model);
  run_dir_.write_atomic(
      "hub/tokenizer.json",
      nlohmann::json{{"kind", "synthetic-chain"}, {"vocab", vocab}}.dump(2) + "\n");
  artifacts_ =
      std::make_unique<ArtifactServer>(hub, std::vector<std::string>{"tokenizer.json"}, secret_);
  artifact_url_ = artifacts_->start();
  hist_->harness("artifact_hub", {{"url", artifact_url_}, {"files", {"tokenizer.json"}}});
}

}  // namespace fl::harness::detail
