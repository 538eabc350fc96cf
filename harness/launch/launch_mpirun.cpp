// The mpirun launcher: one `mpirun` process starts every rank from an MPMD app file (one line per
// rank, so each keeps its own environment). mpirun aborts the whole job when a rank fails; a
// rank's own end is known from its exit event, and ranks that never sent one ended with mpirun.
#include <csignal>
#include <map>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/launch/launcher.hpp"
#include "harness/launch/mpi_tuning.hpp"
#include "harness/process/hosts.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

namespace {

// Rank-identity variables every app-file line carries; the rest of a rank's environment is
// inherited from mpirun's own unless the scenario sets it (or a fault does: app_line).
bool rank_specific(const Scenario& s, int rank, const std::string& k) {
  static const char* const kIdentity[] = {
      "RANK",      "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
      "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TMPDIR"};
  if (k.rfind("FAULTLINE_", 0) == 0 || s.env.all.count(k)) return true;
  for (const char* id : kIdentity) {
    if (k == id) return true;
  }
  auto it = s.env.per_rank.find(rank);
  return it != s.env.per_rank.end() && it->second.count(k);
}

// Open MPI's app-file reader ends a line at '#' or "//" (a comment): a word with either would cut
// the rank's line there (an `http://` URL leaves no executable: "No executable was specified").
bool app_file_comment(const std::string& v) {
  return v.find('#') != std::string::npos || v.find("//") != std::string::npos;
}

// The harness's own variables the app file cannot carry (app_file_comment) and that every rank
// has with one value (the artifact hub's URL): mpirun's environment carries them instead.
std::map<std::string, std::string> inherited_only(LaunchHost& h) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : h.rank_env(0)) {
    if (app_file_comment(v)) out[k] = v;
  }
  for (int r = 1; r < h.s.topo.ranks && !out.empty(); ++r) {
    const auto env = h.rank_env(r);
    std::erase_if(out, [&](const auto& kv) {
      const auto it = env.find(kv.first);
      return it == env.end() || it->second != kv.second;
    });
  }
  return out;
}

class MpirunLauncher : public Launcher {
 public:
  LauncherKind kind() const override { return LauncherKind::kMpirun; }

  void start(LaunchHost& h, const std::vector<std::string>& args) override {
    std::string app;
    const auto shared = inherited_only(h);
    for (int r = 0; r < h.s.topo.ranks; ++r) app += app_line(h, r, args, shared) + "\n";
    h.run_dir->write_atomic("appfile", app);
    ProcessSpec p;
    p.name = "mpirun";
    p.argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
              "none",   "--tag-output",        "--app",           h.dir + "/appfile"};
    const auto host_opts = mpirun_host_options(h.s);  // topology.hosts (harness/process/hosts.cpp)
    p.argv.insert(p.argv.end() - 2, host_opts.begin(), host_opts.end());
    for (const auto& [name, value] : local_mpi_params(h.s)) {  // one machine: no fabric probing
      p.argv.insert(p.argv.end() - 2, {"--mca", name, value});
    }
    p.cwd = h.dir;
    auto menv = base_env();
    h.faults.adjust_helper(p, menv);  // mpirun and its ranks share the run's mount namespace
    for (auto& [k, v] : menv) p.env.push_back(k + "=" + v);
    p.env.push_back("TMPDIR=" + h.dir + "/tmp");
    p.env.push_back("OMPI_MCA_btl_vader_backing_directory=" + h.dir + "/tmp");
    p.env.push_back(fmt::format("{}={}", kControlSecretEnv, h.secret));
    // Inherited by the ranks (an app-file line carries only what the scenario sets itself).
    for (const auto& [k, v] : local_mpi_env(h.s)) p.env.push_back(k + "=" + v);
    for (const auto& [k, v] : shared) p.env.push_back(k + "=" + v);
    p.tag_output = true;
    mpirun_ = h.sup.spawn(p);
    for (int r = 0; r < h.s.topo.ranks; ++r) {
      h.started(r);
      h.hist.harness("launch", {{"pid", mpirun_}, {"launcher", "mpirun"}, {"argv", args}}, r);
    }
  }

  std::string job_process_name() const override { return "mpirun"; }
  bool is_job_process(pid_t pid) const override { return pid != 0 && pid == mpirun_; }
  void job_process_ended() override { mpirun_ = 0; }

  void stop(Supervisor& sup) override {
    if (mpirun_ != 0) sup.signal(mpirun_, SIGKILL);
  }

 private:
  static std::string app_line(LaunchHost& h, int r, const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& shared) {
    const auto before = h.rank_env(r);  // what the faults found: mpirun's ranks inherit it
    auto env = before;
    ProcessSpec line_spec;
    line_spec.argv = args;
    std::vector<std::string> unset;
    h.faults.adjust_rank(r, line_spec, env, &unset);
    std::string line =
        "-np 1" + appfile_host_option(h.s, r) + fmt::format(" --wdir {}/ranks/rank{}", h.dir, r);
    for (auto& k : unset) check_env_key(r, k);
    for (auto& [k, v] : env) {
      if (k == kControlSecretEnv) continue;  // in mpirun's own environment, never in a file
      // Inherited from mpirun's environment, unless a fault set or changed it (an env fault's CXX).
      const auto was = before.find(k);
      if (!rank_specific(h.s, r, k) && was != before.end() && was->second == v) continue;
      if (const auto it = shared.find(k); it != shared.end() && it->second == v) continue;
      check_env_key(r, k);  // a name with whitespace or '=' would add app-file options
      if (v.find_first_of(" \t\n\"'") != std::string::npos || v.empty() || app_file_comment(v)) {
        raise<Error>(
            "launcher mpirun: rank {} variable {}='{}' has whitespace, quotes, '#' or '//', or is "
            "empty (an app file cannot carry it: Open MPI reads '#' and '//' as a comment; use "
            "launcher: local)",
            r, k, v);
      }
      line += fmt::format(" -x {}={}", k, v);
    }
    for (auto& k : unset) line += " -x " + k + "=";  // app files cannot unset: empty it
    for (auto& a : line_spec.argv) {
      // The app file is split at whitespace: such a word would reach the rank as several.
      if (a.find_first_of(" \t\n\"'") != std::string::npos || app_file_comment(a)) {
        raise<Error>(
            "launcher mpirun: rank {} argument '{}' has whitespace, quotes, '#' or '//' (an app "
            "file cannot carry it as one word: Open MPI reads '#' and '//' as a comment; use "
            "launcher: local)",
            r, a);
      }
      line += " " + a;
    }
    return line;
  }

  pid_t mpirun_ = 0;
};

}  // namespace

const LauncherInfo& mpirun_launcher() {
  static const LauncherInfo info{LauncherKind::kMpirun,
                                 "mpirun",
                                 "an MPMD app file",
                                 /*rank_processes=*/false,
                                 /*aborts_on_rank_failure=*/true,
                                 [] { return std::make_unique<MpirunLauncher>(); }};
  return info;
}

}  // namespace fl::harness
