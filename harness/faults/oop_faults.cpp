#include "harness/faults/oop_faults.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/settings.hpp"
#include "harness/history/history.hpp"
#include "harness/model/build_paths.hpp"
#include "harness/process/supervisor.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

FAULTLINE_SETTING(kPluginDir, std::string, "FAULTLINE_PLUGIN_DIR", "",
                  "Directory of the worker plugins (default: this build's)");

std::string faults::plugin_dir() {
  return kPluginDir.get().empty() ? this_build::plugin_build_dir() : kPluginDir.get();
}

std::vector<std::string> faults::plugin_libraries() {
  std::vector<std::string> have;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(plugin_dir(), ec)) {
    if (e.is_regular_file()) have.push_back(e.path().filename().string());
  }
  if (plugin_dir() == this_build::plugin_build_dir()) {
    const std::string built = this_build::plugin_build_libs();
    for (size_t at = 0; at <= built.size();) {
      const size_t comma = std::min(built.find(',', at), built.size());
      if (comma > at) have.push_back(built.substr(at, comma - at));
      at = comma + 1;
    }
  }
  std::sort(have.begin(), have.end());
  have.erase(std::unique(have.begin(), have.end()), have.end());
  return have;
}

OutOfProcessFaults::OutOfProcessFaults(const Scenario& s, std::string run_dir, History& hist,
                                       Supervisor& sup)
    : s_(s),
      dir_(std::move(run_dir)),
      hist_(hist),
      box_(s, dir_, hist, sup),
      host_{s_, dir_, hist, sup, box_, 0, faults::plugin_dir(), injected_} {
  for (const auto& f : s.faults.oop) faults_.push_back(f->clone());
  done_.assign(faults_.size(), false);
}

OutOfProcessFaults::~OutOfProcessFaults() {
  heal(true);
}

void OutOfProcessFaults::prepare(int master_port) {
  host_.master_port = master_port;
  bool between_hosts = false;  // a network fault with topology.hosts: the hosts get a chain
  for (auto& f : faults_) between_hosts |= !s_.topo.hosts.empty() && f->kind == "network";
  if (s_.topo.network == "namespaces" || between_hosts) box_.setup_network();
  for (auto& f : faults_) f->setup(host_);
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (!faults_[i]->timed()) {
      done_[i] = true;
    } else if (faults_[i]->at == faults::When::kLaunch) {
      inject(i, nullptr, faults::When::kLaunch);
    }
  }
}

void OutOfProcessFaults::adjust_rank(int rank, ProcessSpec& spec,
                                     std::map<std::string, std::string>& env,
                                     std::vector<std::string>* unset) const {
  box_.adjust_rank(rank, spec, env);
  const std::string plugins = fmt::format("{}/ranks/rank{}/plugins", dir_, rank);
  env["FAULTLINE_PLUGIN_PATH"] = fs::exists(plugins) ? plugins : host_.plugin_dir;
  env["FAULTLINE_JIT_DIR"] = dir_ + "/jit";
  std::vector<std::string> removed;
  faults::Launch launch{spec, env, unset ? *unset : removed};
  for (const auto& f : faults_) f->adjust_rank(host_, rank, launch);
}

bool OutOfProcessFaults::inject(size_t i, const faults::Progress* p, faults::When now) {
  auto& f = *faults_[i];
  try {
    if (!f.inject(host_, p, now)) return false;
    done_[i] = true;
  } catch (const Error& e) {
    // A fault that could not be injected is recorded, and the run goes on: the verdict shows it.
    done_[i] = true;
    hist_.harness("fault_failed",
                  {{"fault", f.kind}, {"when", faults::when_name(now)}, {"error", e.what()}},
                  f.rank);
    injected_.push_back(fmt::format("{} fault failed: {}", f.kind, e.what()));
    return false;
  }
  return f.restart;
}

bool OutOfProcessFaults::on_progress(const std::map<int, int64_t>& max_step,
                                     const std::function<pid_t(int)>& pid_of,
                                     const std::function<bool(int)>& is_local_child) {
  const faults::Progress progress{max_step, pid_of, is_local_child};
  bool restart = false;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = *faults_[i];
    if (done_[i] || f.at != faults::When::kStep) continue;
    auto it = max_step.find(f.rank >= 0 ? f.rank : 0);
    if (it == max_step.end() || it->second < f.step) continue;
    restart |= inject(i, &progress, faults::When::kStep);
  }
  return restart;
}

bool OutOfProcessFaults::on_all_exited() {
  bool restart = false;
  for (size_t i = 0; i < faults_.size(); ++i) {
    if (!done_[i] && faults_[i]->at == faults::When::kExit) {
      restart |= inject(i, nullptr, faults::When::kExit);
    }
  }
  return restart;
}

void OutOfProcessFaults::on_rank_exit(int rank) {
  for (auto& f : faults_) {
    try {
      f->on_rank_exit(host_, rank);
    } catch (const std::exception& e) {  // an agent that cannot report must not fail the run
      hist_.harness("fault_failed", {{"fault", f->kind}, {"on_rank_exit", e.what()}}, rank);
    }
  }
}

void OutOfProcessFaults::explain_exit(int rank, nlohmann::json& exit) {
  for (auto& f : faults_) {
    try {
      f->explain_exit(host_, rank, exit);
    } catch (const std::exception& e) {  // the launcher's account stands
      hist_.harness("fault_failed", {{"fault", f->kind}, {"explain_exit", e.what()}}, rank);
    }
  }
}

void OutOfProcessFaults::heal(bool processes_gone) {
  if (!healed_ || processes_gone) {
    for (auto it = faults_.rbegin(); it != faults_.rend(); ++it) {
      try {
        (*it)->heal(host_, processes_gone);
      } catch (...) {  // heal never throws; a fault that does must not stop the others
      }
    }
  }
  if (!healed_) {
    healed_ = true;
    std::error_code ec;
    fs::remove_all(dir_ + "/.faultline", ec);
  }
  // The hosts' chains go while their agents are still up (they stop before teardown).
  if (!processes_gone && box_.agents()) box_.remove_host_chains();
  if (processes_gone) box_.check_gone();
}

}  // namespace fl::harness
