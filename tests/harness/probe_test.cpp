// The probe (issue 21): what the C ABI writes is what the harness ingests. The library is loaded
// here as a job would load it; its lines go through ProbeIngest into a History, whose schema
// check (event_schema.cpp) accepts every one.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"
#include "harness/history/probe_ingest.hpp"
#include "tests/support/process.hpp"
#include "workloads/probe/probe.h"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string test_dir() {
  return test::fresh_test_dir("probe",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

TEST(Probe, CAbiEventsAreIngestedIntoTheHistoryInItsSchema) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/ranks/rank1");
  ::setenv("FAULTLINE_PROBE_FILE", probe_file(dir, 1).c_str(), 1);
  ASSERT_EQ(fl_probe_enabled(), 1);
  EXPECT_EQ(fl_probe_event("hello", -1, "{\"world_size\":2,\"pid\":7}"), 0);
  EXPECT_EQ(fl_probe_section("setup", 1), 0);
  EXPECT_EQ(fl_probe_section("setup", 0), 0);
  EXPECT_EQ(fl_probe_collective("all_reduce", "started", "ddp", 0, 1024, "float32"), 0);
  EXPECT_EQ(fl_probe_collective("all_reduce", "timed-out", "ddp", 0, 1024, "float32"), 0);
  EXPECT_EQ(fl_probe_step(0, 2.5, 0.1, 0.04), 0);
  EXPECT_EQ(fl_probe_step(1, NAN, 0.1, -1), 0);  // a non-finite loss is null
  EXPECT_EQ(fl_probe_heartbeat(), 0);
  EXPECT_EQ(fl_probe_error("comm timeout", "gloo: \"Timed out\"\nwaiting", 1), 0);
  // Refused by the library itself: not a word, a step below -1, data that is not one object.
  EXPECT_EQ(fl_probe_event("Bad Kind", -1, "{}"), -1);
  EXPECT_EQ(fl_probe_event("log", -2, "{}"), -1);
  EXPECT_EQ(fl_probe_event("log", -1, "[1]"), -1);
  EXPECT_EQ(fl_probe_section("not a word", 1), -1);
  fl_probe_close();
  ::unsetenv("FAULTLINE_PROBE_FILE");

  History h(dir + "/history.jsonl");
  h.harness("run_start", {{"ranks", 2}});
  ProbeIngest ingest(dir, 2);
  EXPECT_EQ(ingest.poll(h), 9u);
  EXPECT_EQ(h.rejected(), 0u);
  EXPECT_EQ(ingest.poll(h), 0u);  // nothing new: nothing twice
  std::map<std::string, int> kinds;
  for (const auto& e : h.events()) {
    if (e.source != "rank") continue;
    EXPECT_EQ(e.rank, 1);  // the file's rank
    ++kinds[e.kind];
    const auto d = nlohmann::json::parse(e.data_json);
    if (e.kind == "step" && e.step == 0) {
      EXPECT_DOUBLE_EQ(d["loss"].get<double>(), 2.5);
      EXPECT_DOUBLE_EQ(d["comm_s"].get<double>(), 0.04);
    }
    if (e.kind == "step" && e.step == 1) {
      EXPECT_TRUE(d["loss"].is_null());
      EXPECT_FALSE(d.contains("comm_s"));
    }
    if (e.kind == "error") {
      EXPECT_EQ(d["message"], "gloo: \"Timed out\"\nwaiting");
    }
    if (e.kind == "collective") {
      EXPECT_EQ(d["group"], "ddp");
    }
  }
  EXPECT_EQ(kinds["hello"], 1);
  EXPECT_EQ(kinds["section"], 2);
  EXPECT_EQ(kinds["collective"], 2);
  EXPECT_EQ(kinds["step"], 2);
  EXPECT_EQ(kinds["heartbeat"], 1);
  EXPECT_EQ(kinds["error"], 1);
}

TEST(Probe, OffWithoutAFileAndHalfWrittenLinesWait) {
  ::unsetenv("FAULTLINE_PROBE_FILE");
  ::unsetenv("FAULTLINE_PROBE_DIR");
  EXPECT_EQ(fl_probe_enabled(), 0);
  EXPECT_EQ(fl_probe_step(3, 1.0, 0.1, 0.0), 0);  // does nothing, succeeds
  fl_probe_close();

  const auto dir = test_dir();
  fs::create_directories(dir + "/ranks/rank0");
  History h(dir + "/history.jsonl");
  h.harness("run_start", {{"ranks", 1}});
  ProbeIngest ingest(dir, 1);
  {
    std::ofstream out(probe_file(dir, 0));
    out << R"({"seq":0,"time_unix_ns":1,"kind":"step","step":0,"data":{"loss":1.0}})"
        << "\n"
        << R"({"seq":1,"time_unix_ns":2,"kind":"st)";  // a writer half-way through a line
  }
  EXPECT_EQ(ingest.poll(h), 1u);
  {
    std::ofstream out(probe_file(dir, 0), std::ios::app);
    out << R"(ep","step":1,"data":{"loss":0.5}})"
        << "\n"
        << "not json\n"
        << R"({"seq":2,"time_unix_ns":3,"kind":"step","step":-1,"data":{}})"
        << "\n";
  }
  EXPECT_EQ(ingest.poll(h), 2u);  // the completed line, and the step event the history refuses
  EXPECT_EQ(ingest.unparsable(), 1u);
  // The line that is not JSON, and the step event the history refuses (a step needs a step >= 0):
  // both counted with the history's refused events.
  EXPECT_EQ(h.rejected(), 2u);
  int steps = 0;
  for (const auto& e : h.events()) steps += e.kind == "step";
  EXPECT_EQ(steps, 2);
}

}  // namespace
}  // namespace fl::harness
