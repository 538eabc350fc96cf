// Where and how a suite ran: the build (version, commit, build type, compiler, MPI and NCCL
// versions), the machine (cores, hostname, load) and a calibration of its CPU speed sampled over
// the suite's window. summary.json, leaderboards and the suite report carry it, so a number can be
// traced to the binary and the machine state that produced it (docs/catalog.md#provenance).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fl::harness {

struct CalibrationSample {
  std::string at;         // ISO 8601 local time with offset
  int finished_runs = 0;  // runs finished when it was taken
  double gflops = 0;
};

struct Provenance {
  std::string version, commit, build_type, compiler, mpi, nccl;  // nccl: "" without NCCL
  int cores = 0;
  std::string hostname;
  std::string started;      // ISO 8601
  double load1_start = -1;  // 1-minute load average; -1: unknown
  double load1_end = -1;
  std::vector<CalibrationSample> calibration;

  double calibration_median() const;  // 0 without samples
  nlohmann::json to_json() const;
  // Adds a calibration sample measured now (about 150 ms of one core).
  void calibrate(int finished_runs);
};

// Build and machine facts, the start time and load; no calibration sample yet.
Provenance collect_provenance();
// One markdown paragraph (leaderboards).
std::string provenance_markdown(const nlohmann::json& p);

// "2026-01-31T04:24:55+01:00"
std::string iso8601_now();
// The 1-minute load average, -1 when /proc/loadavg cannot be read.
double load_average_1m();
std::string host_name();

}  // namespace fl::harness
