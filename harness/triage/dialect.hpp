// The catalogue's own dialect (issue 34, item 2): for a symptom candidate that faultline itself
// produces, the lines faultline's runs print for the event an evidence line reports, the
// fl-detect-logs signature that reads both, and the scenarios that expect the symptom.
//
// ci/check_layers.py keeps harness/triage from including harness/detectors/ and the workloads, so
// the two tables here are copies: kLogsSignatures of harness/detectors/logs_signatures.hpp (row
// for row), and the example lines of what workloads/comm/worker_errors.cpp prints (faultline's
// sentence, and log_dialect.cpp's lines under workload.fidelity: pytorch). tests/triage/
// dialect_test.cpp checks both against the real code (the detector's table, and the lines a
// failing worker prints in each dialect), so neither can drift.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fl::triage {

struct Result;

namespace dialect {

// A row of fl-detect-logs' table (harness/detectors/logs_signatures.hpp's Signature).
struct LogsSignature {
  const char* name;
  const char* pattern;                  // ECMAScript, case-insensitive, regex_search
  const char* train;                    // the symptom it means when the run trains ("": none)
  const char* serve;                    // ... when it serves
  const char* train_before_first_step;  // nullptr: as `train`
};
const std::vector<LogsSignature>& logs_signatures();
// The first row `line` matches (the detector's first-match rule), or nullptr. Like the detector,
// it reads the line with its paths masked (base/text_mask.hpp): an issue's `/data/truncated_wiki/`
// is no corrupt shard. (Triage's own signature tables read the raw line: their rows name
// traceback paths such as deepspeed/runtime/zero/stage3.py.)
const LogsSignature* classify(const std::string& line);

// What a failing faultline worker prints for one event, in both dialects.
struct Example {
  const char* signature;  // the logs signature that reads it (the test checks it does)
  const char* kind;       // the worker's error class (worker_errors.cpp): "comm timeout", ...
  const char* message;    // the exception's message, as faultline's own code words it
  // The lines printed under workload.fidelity: pytorch; empty: faultline's sentence in both.
  // A NCCL WARN line starts with HOST:PID:TID there (the test compares it so).
  std::vector<const char*> pytorch;
  // Where faultline produces it: the source file, the format string the message begins with
  // (verbatim, adjacent literals joined; dialect_test finds it there and matches the message and a
  // real run's line against it), and the smallest scenario whose run prints it (a name in
  // scenarios/symptoms, else in scenarios/issues; nullptr: none short enough for the test).
  const char* source = nullptr;
  const char* format = nullptr;
  const char* scenario = nullptr;
  // The text a rank prints before the message when the event is not a worker's fatal error
  // (nullptr: "faultline worker error (KIND): ").
  const char* lead = nullptr;
  // Settings the test's run of `scenario` overrides ("KEY=VALUE ...", space-separated).
  const char* run_set = nullptr;
};
const std::vector<Example>& examples();
// The line the default dialect prints: "faultline worker error (KIND): MESSAGE" (or LEAD MESSAGE).
std::string faultline_line(const Example& e);

// An fl-detect-logs signature no faultline worker or launcher prints a line for, and why.
struct NoProducer {
  const char* signature;
  const char* why;
};
const std::vector<NoProducer>& no_producer();

// A scenario of scenarios/symptoms or scenarios/issues and the symptom it expects.
struct ScenarioRef {
  std::string name;  // the file's stem
  std::string dir;   // "symptoms" or "issues"
  std::string symptom;
};
// Every *.yaml under `dirs` (sorted by folder, then name) with an expect.symptom or, failing
// that, a reference.symptom; files that do not parse are skipped.
std::vector<ScenarioRef> load_scenario_refs(const std::vector<std::string>& dirs);

// The dialect of one event a candidate's evidence reports.
struct Match {
  std::string signature;                   // the logs signature
  std::string train, serve, before_first;  // what fl-detect-logs reads it as
  size_t line = 0;                         // the evidence line it matched
  std::string pytorch, faultline;          // the lines faultline's runs print (pytorch: may equal)
  std::string no_producer;                 // non-empty: faultline prints no line for it (why)
};
struct Produced {
  std::vector<Match> matches;          // at most 2, at least 1 when filled
  std::vector<std::string> scenarios;  // at most 3
  size_t more_scenarios = 0;
  bool empty() const { return matches.empty(); }
};

// Fills Candidate::faultline for each symptom candidate of `r` that a scenario of `refs` expects
// and whose evidence holds a line fl-detect-logs reads: for the top candidate, and for another when
// fl-detect-logs reads that event as its symptom. An event of examples() gets faultline's lines;
// one of no_producer() gets the sentence saying faultline prints none. The others (and root
// causes) stay empty: faultline does not produce that text for that symptom.
void annotate(Result& r, const std::vector<ScenarioRef>& refs);

}  // namespace dialect
}  // namespace fl::triage
