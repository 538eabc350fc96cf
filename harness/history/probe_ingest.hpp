// The probe's per-rank files (workloads/probe/probe.h, python/faultline_probe): a job with no
// gRPC inside appends its events to RUN_DIR/ranks/rankN/probe.jsonl; the harness reads each file
// as it grows (every tick and once more at the end) and appends every complete line to the
// history as an event of that rank. The history checks each one (event_schema.cpp) as it does a
// streamed event. A line that is not JSON, nested deeper than 64 levels or longer than
// kMaxEventLineBytes, and a probe file that is not a regular file, are skipped and counted with
// the history's refused events (History::refuse): the job writes these files, not the harness.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/file_read.hpp"
#include "harness/history/history.hpp"

namespace fl::harness {

// ranks/rankN/probe.jsonl in `run_dir`.
std::string probe_file(const std::string& run_dir, int rank);

// Parses one line of a rank's event file (events.jsonl, probe.jsonl) into a rank event of `rank`
// (the file's rank, whatever the line says; data that is not an object dropped); false, with the
// reason in *why when given, when the line is not a JSON object with a kind (a torn last line of
// a killed rank, a field of the wrong type, nested too deep: parse_json_line).
bool parse_rank_line(const std::string& line, int rank, HistoryEvent& e,
                     std::string* why = nullptr);

class ProbeIngest {
 public:
  ProbeIngest(std::string run_dir, int ranks);
  // Appends the complete lines written since the last call; returns how many.
  size_t poll(History& h);
  uint64_t ingested() const { return ingested_; }
  uint64_t unparsable() const { return unparsable_; }

 private:
  std::string dir_;
  std::vector<LineReader> readers_;  // each rank's file, read on from where the last poll left it
  std::vector<bool> refused_file_;   // its file was not a regular file (said once)
  uint64_t ingested_ = 0, unparsable_ = 0;
};

}  // namespace fl::harness
