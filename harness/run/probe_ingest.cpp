#include "harness/run/probe_ingest.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fl::harness {

std::string probe_file(const std::string& run_dir, int rank) {
  return fmt::format("{}/ranks/rank{}/probe.jsonl", run_dir, rank);
}

bool parse_rank_line(const std::string& line, int rank, HistoryEvent& e) {
  try {
    e = parse_json_line(line, EventLine::kRank);
  } catch (const nlohmann::json::exception&) {
    return false;  // not JSON (a torn last line), not an object, a field of the wrong type
  }
  e.source = "rank";
  e.rank = rank;
  if (e.data_json.empty() || e.data_json[0] != '{') e.data_json = "{}";  // data not an object
  return !e.kind.empty();
}

size_t ProbeIngest::poll(History& h) {
  size_t n = 0;
  for (size_t r = 0; r < offsets_.size(); ++r) {
    const int f = ::open(probe_file(dir_, static_cast<int>(r)).c_str(), O_RDONLY | O_CLOEXEC);
    if (f < 0) continue;
    std::string buf;
    char chunk[65536];
    for (;;) {
      const ssize_t got =
          ::pread(f, chunk, sizeof chunk, static_cast<off_t>(offsets_[r] + buf.size()));
      if (got <= 0) break;
      buf.append(chunk, static_cast<size_t>(got));
    }
    ::close(f);
    // Only complete lines: a writer may be half-way through the last one.
    size_t start = 0;
    for (size_t nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n', start)) {
      const std::string line = buf.substr(start, nl - start);
      start = nl + 1;
      if (line.empty()) continue;
      HistoryEvent e;
      if (!parse_rank_line(line, static_cast<int>(r), e)) {
        ++unparsable_;
        continue;
      }
      h.append(std::move(e));  // checked there; a refused event is counted by the history
      ++ingested_;
      ++n;
    }
    offsets_[r] += start;
  }
  return n;
}

}  // namespace fl::harness
