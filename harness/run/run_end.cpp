// The end of a run: the teardown (tools drained, faults healed, agents stopped, every process
// reaped), the ranks' events that only their own files hold, the verdict (verdict.json) and the
// summary.
#include <cerrno>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "base/file_read.hpp"
#include "harness/control/metrics_endpoint.hpp"
#include "harness/faults/oop_faults.hpp"
#include "harness/process/supervisor.hpp"
#include "harness/run/command_probe.hpp"
#include "harness/run/run.hpp"
#include "harness/run/run_agents.hpp"
#include "harness/run/run_side.hpp"
#include "harness/run/run_tools.hpp"
#include "harness/run/summary_lines.hpp"
#include "harness/run/torchelastic.hpp"

namespace fl::harness::detail {

void Run::finish(RunResult& res) {
  stopping_ = true;
  timeout_.cancel();
  ticker_.cancel();
  recovery_timer_.cancel();
  if (sup_) {
    side_->finish_baseline(*sup_, stop_reason_.rfind("harness got", 0) == 0);
    tools_->drain(loop_, *sup_);
  }
  if (faults_) faults_->heal(false);
  agents_->stop();  // healed through them; nothing of theirs outlives the run
  if (sup_) sup_->teardown(std::chrono::milliseconds(2000));
  if (faults_) faults_->heal(true);
  if (ctl_) ctl_->shutdown();
  if (command_) command_->final_poll();  // what the probe wrote until the end
  std::optional<FirstFailure> first;
  if (command_) {  // the ranks' error files, then the first failure as torchrun would name it
    command_->read_error_files();
    first = first_failure(hist_->events());
    if (first) hist_->harness("first_failure", first->to_json(), first->rank);
  }
  if (ctl_) merge_local_files();
  if (const uint64_t n = hist_->rejected(); n > 0) {
    hist_->harness("events_rejected", {{"count", n}, {"first", hist_->rejected_reasons()}});
  }
  if (ctl_ && ctl_->rejected() > 0) {
    hist_->harness("control_rejected",
                   {{"calls", ctl_->rejected()}, {"why", "no or wrong secret"}});
  }
  if (metrics_ && metrics_->unauthorized() > 0) {
    hist_->harness("metrics_rejected", {{"requests", metrics_->unauthorized()},
                                        {"scrapes", metrics_->scrapes()},
                                        {"why", "no or wrong secret"}});
  }
  hist_->harness("run_end", {{"reason", stop_reason_.empty() ? "all ranks ended" : stop_reason_},
                             {"restarts", restart_.restarts()}});
  hist_->flush();
  std::error_code ec;
  std::filesystem::remove_all(dir_ + "/tmp", ec);
  const auto history = hist_->events();
  res.verdict = judge(s_.expect, history);
  nlohmann::json v = res.verdict.to_json();
  v["state"] = "done";
  v["run_id"] = id_;
  v["scenario"] = s_.name;
  v["fix"] = o_.fix;
  if (!res.harness_error.empty()) v["harness_error"] = res.harness_error;
  if (first) v["first_failure"] = first->to_json();
  v["rejected_events"] = hist_->rejected();
  v["warnings"] = plan_report(s_.faults.plans, history).warnings;  // plans armed that never fired
  run_dir_.write_atomic("verdict.json",
                        v.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  res.exit_code = !res.harness_error.empty() ? 2 : outcome_exit_code(res.verdict.outcome);
  print_summary(res, history);
}

void Run::merge_local_files() {
  const auto got = ctl_->received();
  const auto drops = ctl_->dropped();
  for (int r = 0; r < s_.topo.ranks; ++r) {
    // The rank wrote this file: it may be a FIFO, hold lines nested past any stack or longer than
    // memory. Each such line is counted with the history's refused events, never fatal.
    const std::string name = fmt::format("ranks/rank{}/events.jsonl", r);
    std::string why;
    const FileFd f = open_regular_file(dir_ + "/" + name, &why);
    if (!f && errno != ENOENT) hist_->refuse(fmt::format("{}: {}", name, why));
    LineReader in(kMaxEventLineBytes);
    std::string line;
    uint64_t late = 0, total = 0;
    auto it = got.find(r);
    for (LineReader::Got g; f && (g = in.next(f.get(), &line)) != LineReader::Got::kEnd;) {
      // A torn last line of a killed rank has no newline: the reader leaves it.
      if (g == LineReader::Got::kTooLong) {
        hist_->refuse(fmt::format("{}:{}: a line longer than {} bytes", name, in.line_number(),
                                  kMaxEventLineBytes));
        continue;
      }
      if (line.empty()) continue;
      HistoryEvent e;
      try {
        e = parse_json_line(line, EventLine::kRank);
      } catch (const std::exception& x) {  // JsonRefused, a field of the wrong type
        hist_->refuse(
            fmt::format("{}:{}: {}", name, in.line_number(), std::string(x.what()).substr(0, 200)));
        continue;
      }
      ++total;
      if (it != got.end() && it->second.count(e.seq)) continue;
      // As the rank wrote it (the history's check refuses a foreign rank or data that is not an
      // object); a line without a rank is this file's rank's.
      e.source = "rank";
      if (e.rank == -1) e.rank = r;
      e.late = true;
      hist_->append(std::move(e));
      ++late;
    }
    const auto d = drops.find(r);
    hist_->harness("telemetry",
                   {{"events_in_file", total},
                    {"streamed", it == got.end() ? 0 : it->second.size()},
                    {"recovered_from_file", late},
                    {"dropped_by_queue", d == drops.end() ? 0 : d->second}},
                   r);
  }
}

}  // namespace fl::harness::detail
