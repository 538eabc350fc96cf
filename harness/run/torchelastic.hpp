// torchrun's conventions, the runner's side (issue 36): each rank's TORCHELASTIC_ERROR_FILE (the
// JSON torchelastic's @record writes when a rank's entry point raises) read after the job; under
// one torchrun, how each worker ended, which torchrun itself does not tell apart (the agent exits
// 1 for all): killed by the scenario's signal, failed with an exception, or closed by torchrun
// when a peer failed ("Sending process PID closing signal SIGTERM"); and from these the job's first
// failure, ordered as torchelastic's ChildFailedError orders it (the error file's timestamp, in
// seconds) and, within one second, by when the evidence was stamped.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"

namespace fl::harness {

// One error file as torchelastic's ErrorHandler writes it.
struct WorkerError {
  std::string message;    // "RuntimeError: boom"
  std::string exception;  // "RuntimeError" (the message up to its first ':'; "" when none)
  std::string callstack;  // the end of extraInfo.py_callstack (kCallstackChars at most)
  int64_t timestamp = 0;  // seconds since the epoch, as the rank's clock said
  int error_code = 0;     // errorCode: set by torchrun when it copies a child's file (0: none)
  nlohmann::json to_json() const;
};

inline constexpr size_t kCallstackChars = 2000;
inline constexpr size_t kErrorFileBytes = size_t{1} << 20;

// ErrorHandler's two formats: {"message": {"message": M, "extraInfo": {"py_callstack": S,
// "timestamp": "T"}, "errorCode": C}} and {"message": M, "timestamp": T}. nullopt with *why
// (which field is missing or of what type) for anything else.
std::optional<WorkerError> parse_worker_error(const nlohmann::json& j, std::string* why);
// The file at `path` (a regular file of at most kErrorFileBytes, JSON within base/json_bounded's
// limits); nullopt with *why ("PATH: ...") when it is not there or not an error file.
std::optional<WorkerError> read_worker_error(const std::string& path, std::string* why);

// Whether `path` names a file inside `dir` once symlinks in its directories are resolved: an error
// file's path reported by a job is read only there.
bool path_inside(const std::string& path, const std::string& dir);

// The pids torchrun's agent closed, with the signal, from its log lines in the history ("Sending
// process 1234 closing signal SIGTERM", torch.distributed.elastic.multiprocessing.api).
std::map<int64_t, std::string> torchrun_closed(const std::vector<HistoryEvent>& history);

// The first failure of a job, from the history's rank_exit, fault_injected (a signal), worker_error
// (error files) and the ranks' own error events: the candidate with the earliest second (an error
// file's timestamp, else the evidence's wall-clock time), then, within it, the one whose evidence
// was stamped first (a rank's error event, the harness's signal, the exit the harness saw).
// Ranks that ended by the harness's teardown or were closed by torchrun (torn_down) are never
// first.
struct FirstFailure {
  int rank = -1;
  std::string how;      // "signal" (the scenario's), "error_file", "exit"
  std::string message;  // the exception, the signal or the exit class
  nlohmann::json to_json() const;
};
std::optional<FirstFailure> first_failure(const std::vector<HistoryEvent>& history);

}  // namespace fl::harness
