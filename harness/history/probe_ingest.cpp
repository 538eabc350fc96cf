#include "harness/history/probe_ingest.hpp"

#include <cerrno>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file_read.hpp"
#include "base/json_bounded.hpp"

namespace fl::harness {

std::string probe_file(const std::string& run_dir, int rank) {
  return fmt::format("{}/ranks/rank{}/probe.jsonl", run_dir, rank);
}

bool parse_rank_line(const std::string& line, int rank, HistoryEvent& e, std::string* why) {
  try {
    e = parse_json_line(line, EventLine::kRank);
  } catch (const JsonRefused& x) {  // not JSON, nested too deep, too long
    if (why != nullptr) *why = x.what();
    return false;
  } catch (const nlohmann::json::exception& x) {  // not an object, a field of the wrong type
    if (why != nullptr) *why = x.what();
    return false;
  }
  e.source = "rank";
  e.rank = rank;
  if (e.data_json.empty() || e.data_json[0] != '{') e.data_json = "{}";  // data not an object
  if (e.kind.empty() && why != nullptr) *why = "no kind";
  return !e.kind.empty();
}

ProbeIngest::ProbeIngest(std::string run_dir, int ranks)
    : dir_(std::move(run_dir)),
      readers_(static_cast<size_t>(ranks), LineReader(kMaxEventLineBytes)),
      refused_file_(static_cast<size_t>(ranks), false) {}

size_t ProbeIngest::poll(History& h) {
  size_t n = 0;
  for (size_t r = 0; r < readers_.size(); ++r) {
    const int rank = static_cast<int>(r);
    const std::string name = fmt::format("ranks/rank{}/probe.jsonl", rank);
    std::string why;
    const FileFd f = open_regular_file(probe_file(dir_, rank), &why);
    if (!f) {
      // Not written yet is the usual case; a FIFO or a directory in its place is said once.
      if (errno != ENOENT && !refused_file_[r]) {
        refused_file_[r] = true;
        h.refuse(fmt::format("{}: {}", name, why));
      }
      continue;
    }
    LineReader& in = readers_[r];
    std::string line;
    for (LineReader::Got got; (got = in.next(f.get(), &line)) != LineReader::Got::kEnd;) {
      // Only complete lines: a writer may be half-way through the last one.
      if (got == LineReader::Got::kTooLong) {
        ++unparsable_;
        h.refuse(fmt::format("{}:{}: a line longer than {} bytes", name, in.line_number(),
                             kMaxEventLineBytes));
        continue;
      }
      if (line.empty()) continue;
      HistoryEvent e;
      if (!parse_rank_line(line, rank, e, &why)) {
        ++unparsable_;
        h.refuse(fmt::format("{}:{}: {}", name, in.line_number(), why.substr(0, 200)));
        continue;
      }
      h.append(std::move(e));  // checked there; a refused event is counted by the history
      ++ingested_;
      ++n;
    }
  }
  return n;
}

}  // namespace fl::harness
