#include "harness/run/run_tools.hpp"

#include <chrono>
#include <filesystem>

#include "harness/history/history.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/event_loop.hpp"
#include "harness/run/restart_policy.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness {

void RunTools::start(const Scenario& s, const RunOptions& o, Supervisor& sup,
                     RestartPolicy& restart, const std::string& control_addr,
                     const std::string& secret) {
  std::vector<std::string> det = s.tools.detectors;
  det.insert(det.end(), o.detectors.begin(), o.detectors.end());
  tools_ = resolve_tools(det, o.recovery.empty() ? s.tools.recovery : o.recovery);
  if (tools_.empty()) return;
  std::filesystem::create_directories(dir_ + "/tools");
  for (const auto& t : tools_) {
    ProcessSpec p;
    p.name = "tool:" + t.name;
    p.argv = t.argv;
    p.cwd = dir_ + "/tools";
    for (auto& [k, v] : base_env()) p.env.push_back(k + "=" + v);
    for (auto& kv : tool_env(t, control_addr, secret, dir_)) p.env.push_back(kv);
    const pid_t pid = sup.spawn(p);
    pids_[pid] = t.name;
    if (t.recovery) restart.attach_recovery();
    hist_.harness("tool_start",
                  {{"tool", t.name}, {"argv", t.argv}, {"pid", pid}, {"recovery", t.recovery}});
  }
}

bool RunTools::on_exit(const ExitInfo& x) {
  auto it = pids_.find(x.pid);
  if (it == pids_.end()) return false;
  nlohmann::json d = exit_fields(x);
  d["tool"] = it->second;
  hist_.harness("tool_exit", d);
  pids_.erase(it);
  return true;
}

void RunTools::drain(EventLoop& loop, Supervisor& sup) {
  if (pids_.empty()) return;
  hist_.harness("run_ending", {{"tools", pids_.size()}, {"wait_s", 3}});
  loop.restart();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!pids_.empty() && std::chrono::steady_clock::now() < until) {
    loop.run_for(std::chrono::milliseconds(20));
  }
  for (auto& [pid, name] : pids_) sup.mark_by_harness(pid);
}

}  // namespace fl::harness
