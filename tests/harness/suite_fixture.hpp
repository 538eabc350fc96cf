// What the suite runner's tests share (suite_test.cpp: the plan, its files and directories;
// suite_runs_test.cpp: runs): a fresh directory per test, scenario files that load as real ones
// would, and a fake `faultline` (a shell script) that writes the verdict a test wants.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "harness/suite/suite.hpp"
#include "tests/support/process.hpp"

namespace fl::harness::suite_fixture {

inline const std::string kSource = FAULTLINE_SOURCE_DIR;
inline const std::string kSmoke = kSource + "/scenarios/suites/smoke.yaml";

inline std::string test_dir() {
  return test::fresh_test_dir("suite",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

inline std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

inline std::set<std::string> ids(const std::vector<SuiteCase>& cases) {
  std::set<std::string> out;
  for (const auto& c : cases) out.insert(c.id());
  return out;
}

inline SuiteOptions quiet() {
  SuiteOptions o;
  o.progress = false;
  o.calibrate_every = 0;
  return o;
}

// Scenarios the fake faultline knows by name; each loads as a real scenario would.
inline void write_scenarios(const std::string& dir, const std::vector<std::string>& names,
                            bool with_fix = false) {
  std::filesystem::create_directories(dir);
  for (const auto& n : names) {
    std::ofstream(dir + "/" + n + ".yaml")
        << "name: " << n << "\ntopology: {ranks: 1}\n"
        << (n.rfind("gpu", 0) == 0 ? "workload: {steps: 1, device: cuda}\n"
                                   : "workload: {steps: 1}\n")
        << "expect: {oracle: completed}\n"
        << (with_fix ? "fix: {expect: {absent: true}}\n" : "");
  }
}

// A stand-in for `faultline run FILE --results DIR --run-id ID --set seed=N [--fix]`: the
// scenario's name says what happens. flaky-*: fails on the first try of a case, passes after;
// fail-*: always fails (and leaves its pid in RESULTS/ID.pid); unknown-*: an unknown verdict;
// error-*: exits 2 without a verdict; nodevice-*: refused like a CUDA scenario on a machine
// without a device; wait-*: passes once a fail-* run has started and the suite has reaped it (a
// reaped process is gone; a zombie still answers kill -0), at most 30 s; anything else passes.
inline std::string fake_faultline(const std::string& dir) {
  const std::string path = dir + "/fake-faultline";
  std::ofstream(path) << R"(#!/bin/bash
file=$2 results=$4 id=$6
name=$(basename "$file" .yaml)
echo "$id" >> ")" << dir
                      << R"SH(/launched"
mkdir -p "$results/$id"
outcome=pass
case $name in
  flaky-*) if [[ $id != *-try* ]]; then outcome=fail; fi ;;
  fail-*) outcome=fail; echo $$ > "$results/$id.pid" ;;
  unknown-*) outcome=unknown ;;
  wait-*)
    for ((i = 0; i < 600; i++)); do
      gone=0
      for f in "$results"/*.pid; do
        [[ -e $f ]] && ! kill -0 "$(cat "$f")" 2>/dev/null && gone=1
      done
      ((gone)) && break
      sleep 0.05
    done ;;
  error-*) echo "faultline: error: something broke" >&2; rmdir "$results/$id"; exit 2 ;;
  nodevice-*) echo "faultline: $file: workload.device is cuda but no CUDA device is visible on this machine" >&2; rmdir "$results/$id"; exit 2 ;;
esac
printf '{"outcome": "%s", "explanation": "fake <verdict> & \\"%s\\"", "manifested_s": 1.5}\n' \
  "$outcome" "$id" > "$results/$id/verdict.json"
[[ $outcome == pass ]]
)SH";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

// quiet() options whose runs are the fake faultline's (written into `dir`), results in dir/out.
inline SuiteOptions fake_runs(const std::string& dir) {
  SuiteOptions o = quiet();
  o.faultline_bin = fake_faultline(dir);
  o.results_dir = dir + "/out";
  return o;
}

}  // namespace fl::harness::suite_fixture
