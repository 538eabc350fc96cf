// The probe's per-rank files (workloads/probe/probe.h, python/faultline_probe): a job with no
// gRPC inside appends its events to RUN_DIR/ranks/rankN/probe.jsonl; the harness reads each file
// as it grows (every tick and once more at the end) and appends every complete line to the
// history as an event of that rank. The history checks each one (event_schema.cpp) as it does a
// streamed event; a line that is not JSON is counted and skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/run/history.hpp"

namespace fl::harness {

// ranks/rankN/probe.jsonl in `run_dir`.
std::string probe_file(const std::string& run_dir, int rank);

// Parses one line of a rank's event file (events.jsonl, probe.jsonl) into a rank event of `rank`
// (the file's rank, whatever the line says; data that is not an object dropped); false when the
// line is not a JSON object with a kind (a torn last line of a killed rank, a field of the wrong
// type).
bool parse_rank_line(const std::string& line, int rank, HistoryEvent& e);

class ProbeIngest {
 public:
  ProbeIngest(std::string run_dir, int ranks) : dir_(std::move(run_dir)), offsets_(ranks, 0) {}
  // Appends the complete lines written since the last call; returns how many.
  size_t poll(History& h);
  uint64_t ingested() const { return ingested_; }
  uint64_t unparsable() const { return unparsable_; }

 private:
  std::string dir_;
  std::vector<uint64_t> offsets_;  // bytes of each rank's file already read
  uint64_t ingested_ = 0, unparsable_ = 0;
};

}  // namespace fl::harness
