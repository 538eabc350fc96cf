// `faultline verdict` on a run whose harness died before it merged the ranks' own event files
// (SIGKILL): the events a rank wrote to ranks/rankN/events.jsonl (or probe.jsonl) that the history
// lacks are put back, at the time the rank stamped them, before the run is judged.
#include <algorithm>
#include <filesystem>
#include <set>
#include <tuple>

#include "base/file_read.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

RecoveredHistory history_with_rank_files(const std::string& run_dir) {
  RecoveredHistory out;
  out.events = read_history(run_dir + "/history.jsonl");
  // An event is the rank's (rank, seq, its own time stamp, kind): a restarted rank counts seq
  // from 0 again, its time stamps differ.
  using Key = std::tuple<int, uint64_t, int64_t, std::string>;
  std::set<Key> seen;
  int64_t offset = 0;  // unix time of the run's t_ns 0, from the first harness event
  bool have_offset = false;
  uint64_t next_index = 0;
  for (const auto& e : out.events) {
    if (e.source == "rank") seen.insert({e.rank, e.seq, e.time_unix_ns, e.kind});
    if (!have_offset && e.source == "harness" && e.time_unix_ns > 0) {
      offset = e.time_unix_ns - e.t_ns;
      have_offset = true;
    }
    next_index = std::max(next_index, e.index + 1);
  }
  const size_t in_history = seen.size();
  std::vector<HistoryEvent> recovered;
  std::error_code ec;
  const fs::path ranks = fs::path(run_dir) / "ranks";
  for (const auto& d : fs::directory_iterator(ranks, ec)) {
    const std::string name = d.path().filename().string();
    if (name.rfind("rank", 0) != 0) continue;
    int rank = -1;
    try {
      size_t used = 0;
      rank = std::stoi(name.substr(4), &used);
      if (used != name.size() - 4 || rank < 0) continue;
    } catch (const std::exception&) {
      continue;
    }
    // The worker's own file, and the probe's (a command workload's job, docs/workloads.md).
    // The rank wrote these: a FIFO is not waited on, a line over kMaxEventLineBytes or nested
    // past 64 levels is skipped like any line that is not an event.
    for (const char* file : {"events.jsonl", "probe.jsonl"}) {
      const FileFd f = open_regular_file((d.path() / file).string(), nullptr);
      LineReader in(kMaxEventLineBytes);
      std::string line;
      for (LineReader::Got g; f && (g = in.next(f.get(), &line)) != LineReader::Got::kEnd;) {
        HistoryEvent e;
        if (g == LineReader::Got::kTooLong || !parse_rank_line(line, rank, e)) continue;
        if (!seen.insert({e.rank, e.seq, e.time_unix_ns, e.kind}).second) continue;
        e.t_ns = have_offset ? e.time_unix_ns - offset : 0;
        e.late = true;
        recovered.push_back(std::move(e));
      }
    }
  }
  out.recovered = static_cast<int>(recovered.size());
  out.rank_events = static_cast<int>(in_history + recovered.size());
  if (recovered.empty()) return out;
  std::stable_sort(recovered.begin(), recovered.end(),
                   [](const HistoryEvent& a, const HistoryEvent& b) { return a.t_ns < b.t_ns; });
  for (auto& e : recovered) e.index = next_index++;
  // Into the history at the time each was stamped (the history is in time order already).
  std::vector<HistoryEvent> merged;
  merged.reserve(out.events.size() + recovered.size());
  std::merge(std::make_move_iterator(out.events.begin()), std::make_move_iterator(out.events.end()),
             std::make_move_iterator(recovered.begin()), std::make_move_iterator(recovered.end()),
             std::back_inserter(merged),
             [](const HistoryEvent& a, const HistoryEvent& b) { return a.t_ns < b.t_ns; });
  out.events = std::move(merged);
  return out;
}

}  // namespace fl::harness
