// Merging suite results: the N result directories of `faultline suite --shard I/N` (or any set of
// results of one suite) read back as one SuiteResult, so that one summary, one JUnit file, one
// report and one metrics file cover the whole plan (docs/reports.md#faultline-merge). Each case
// appears once and names the shard and directory that ran it; a case two directories hold is
// kept from the first directory given and reported as a duplicate; a case of the shards' plan
// (selection.planned in their summaries) that no directory holds is reported missing.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/suite/suite.hpp"

namespace fl::harness {

// A suite directory's summary.json, read as the suite wrote it. Throws UsageError naming the
// directory and what a suite directory is: missing, not a directory, no summary.json, unreadable,
// not JSON, or not a suite summary.
nlohmann::json read_suite_dir(const std::string& dir);

// The cases of one summary as the suite had them (run directories moved to where `dir` is now,
// when the summary was written elsewhere: a shard copied from another machine).
SuiteResult suite_result_from_summary(const nlohmann::json& summary, const std::string& dir);

// The suite directories `dirs` (at least one) as one result: every case once with its shard
// (`shard`, `shard_dir`), duplicates and missing cases in `merge` and `missing`, the earliest
// shard's provenance with every shard's calibration samples, the longest shard's wall time (they
// ran side by side). `dir` of the result is left empty for the caller. Throws UsageError for a
// directory given twice, a directory that is not a suite's, results of different suites, shards
// of different splits (I/N with different N) or of different plans (another selection or set of
// cases).
SuiteResult merge_suite_dirs(const std::vector<std::string>& dirs);

}  // namespace fl::harness
