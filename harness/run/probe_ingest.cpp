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
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  e = HistoryEvent{};
  e.source = "rank";
  e.rank = rank;
  try {
    e.seq = j.value("seq", uint64_t{0});
    e.time_unix_ns = j.value("time_unix_ns", int64_t{0});
    e.kind = j.value("kind", "");
    e.step = j.value("step", int64_t{-1});
  } catch (const nlohmann::json::exception&) {
    return false;  // a field of the wrong type
  }
  if (e.kind.empty()) return false;
  e.data_json = j.contains("data") && j["data"].is_object() ? j["data"].dump() : "{}";
  return true;
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
