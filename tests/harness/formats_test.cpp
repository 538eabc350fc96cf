// Formats other tools read: a run's timeline as a Trace Event Format file (ui.perfetto.dev,
// chrome://tracing) and suite results as Prometheus text exposition. Both are checked against the
// formats' rules on hand-written histories and summaries whose figures are worked out here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "harness/report/report.hpp"
#include "tests/support/fake_run.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

std::string root() {
  return test::fresh_test_dir("formats",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

using test::FakeRun;

const char* kHang = R"(name: hang
topology: {ranks: 2}
expect: {symptom: "4.11", oracle: error_signature, pattern: "stuck"}
)";
const char* const kClean = test::kCleanScenario;

// Two ranks, two steps each; rank 1's all_reduce #3 completes after 200 ms in flight, rank 0's
// #4 never completes; a signal fault on rank 1 and a detector's diagnosis.
void write_timeline(FakeRun& r) {
  r.ev(0.0, "harness", -1, "run_start", {{"ranks", 2}, {"scenario", "hang"}, {"run_id", "rid-1"}});
  for (int rank = 0; rank < 2; ++rank) {
    r.ev(0.1, "harness", rank, "launch", {{"pid", 100 + rank}, {"launcher", "local"}});
  }
  for (int step = 0; step < 2; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      r.ev(1.0 + step, "rank", rank, "step",
           {{"step_time_s", 0.25},
            {"loss", 5.0 - step},
            {"loss_scale", 1.0},
            {"mem_current", 2 << 20}},
           step);
    }
  }
  r.ev(2.5, "rank", 1, "collective",
       {{"op", "all_reduce"},
        {"group", "dp"},
        {"seq", 3},
        {"in_flight_ms", 200},
        {"state", "started"}},
       2);
  r.ev(2.7, "rank", 1, "collective",
       {{"op", "all_reduce"}, {"group", "dp"}, {"seq", 3}, {"state", "completed"}}, 2);
  r.ev(2.8, "rank", 0, "collective",
       {{"op", "all_reduce"},
        {"group", "dp"},
        {"seq", 4},
        {"in_flight_ms", 300},
        {"state", "started"}},
       2);
  r.ev(0.2, "harness", -1, "tool_start", {{"tool", "hang"}, {"name", "hang"}});
  r.ev(2.9, "harness", 1, "fault_injected", {{"fault", "signal"}, {"signal", "SIGSTOP"}});
  r.ev(3.2, "harness", 1, "output", {{"line", "rank 1 is stuck"}, {"stream", "stderr"}});
  r.ev(3.5, "detector:hang", -1, "diagnosis",
       {{"detector", "hang"},
        {"symptom", "4.11"},
        {"ranks", {1}},
        {"confidence", 0.9},
        {"evidence", "stuck"},
        {"stage", 4}});
  r.ev(4.0, "harness", -1, "run_end", {{"reason", "hang established"}});
}

// A trace's events by phase, each checked against the format's rules for its phase.
struct TraceEvents {
  std::map<int, std::string> process_names;
  std::set<int> used_pids;
  std::vector<nlohmann::json> slices, instants, counters;
};

void sort_trace_events(const nlohmann::json& trace, TraceEvents* out) {
  auto& [process_names, used_pids, slices, instants, counters] = *out;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e;
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string()) << e;
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
      continue;
    }
    used_pids.insert(e["pid"].get<int>());
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e;
    EXPECT_GE(e["ts"].get<double>(), 0) << e;
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number()) << e;
      EXPECT_GE(e["dur"].get<double>(), 0) << e;
      slices.push_back(e);
    } else if (ph == "i") {
      ASSERT_TRUE(e.contains("s")) << e;
      EXPECT_TRUE(e["s"] == "t" || e["s"] == "p" || e["s"] == "g") << e;
      instants.push_back(e);
    } else if (ph == "C") {
      for (auto& [k, v] : e["args"].items()) EXPECT_TRUE(v.is_number()) << e;
      counters.push_back(e);
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
}

const nlohmann::json* find_slice(const TraceEvents& t, int pid, const std::string& name) {
  for (auto& s : t.slices) {
    if (s["pid"] == pid && s["name"] == name) return &s;
  }
  return nullptr;
}

TEST(Trace, FollowsTheTraceEventFormat) {
  const auto dir = root() + "/run";
  {
    FakeRun r(dir, kHang);
    write_timeline(r);
  }
  const std::string path = write_trace(dir);
  EXPECT_EQ(path, dir + "/trace.json");
  std::ifstream in(path);
  const auto trace = nlohmann::json::parse(in);  // the file is one JSON document
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["otherData"]["run_id"], "rid-1");

  TraceEvents events;
  ASSERT_NO_FATAL_FAILURE(sort_trace_events(trace, &events));
  // Every process that has events is named: the harness and both ranks.
  for (int pid : events.used_pids) EXPECT_TRUE(events.process_names.count(pid)) << "pid " << pid;
  EXPECT_EQ(events.process_names[0], "harness");
  EXPECT_EQ(events.process_names[1], "rank 0");
  EXPECT_EQ(events.process_names[2], "rank 1");

  // Steps end where the step event was received and last step_time_s (250 ms).
  const auto* step1 = find_slice(events, 2, "step 1");
  ASSERT_NE(step1, nullptr);
  EXPECT_DOUBLE_EQ((*step1)["ts"].get<double>(), 1.75e6);
  EXPECT_DOUBLE_EQ((*step1)["dur"].get<double>(), 0.25e6);
  EXPECT_DOUBLE_EQ((*step1)["args"]["loss"].get<double>(), 4.0);
  // The completed collective began when it was reported in flight minus its 200 ms.
  const auto* done = find_slice(events, 2, "all_reduce dp #3");
  ASSERT_NE(done, nullptr);
  EXPECT_DOUBLE_EQ((*done)["ts"].get<double>(), 2.3e6);
  EXPECT_DOUBLE_EQ((*done)["dur"].get<double>(), 0.4e6);
  // The one that never completed stays open until the history ends.
  const auto* open = find_slice(events, 1, "all_reduce dp #4 (never completed)");
  ASSERT_NE(open, nullptr);
  EXPECT_DOUBLE_EQ((*open)["ts"].get<double>(), 2.5e6);
  EXPECT_DOUBLE_EQ((*open)["ts"].get<double>() + (*open)["dur"].get<double>(), 4.0e6);
  // The whole run is a slice on the harness.
  ASSERT_NE(find_slice(events, 0, "hang"), nullptr);

  int faults = 0, diagnoses = 0;
  for (auto& i : events.instants) {
    if (i["cat"] == "fault") {
      ++faults;
      EXPECT_EQ(i["pid"], 2);
      EXPECT_NE(i["name"].get<std::string>().find("SIGSTOP"), std::string::npos);
    }
    if (i["cat"] == "diagnosis") ++diagnoses;
  }
  EXPECT_EQ(faults, 1);
  EXPECT_EQ(diagnoses, 1);
  int loss_counters = 0;
  for (auto& c : events.counters) loss_counters += c["name"] == "loss" ? 1 : 0;
  EXPECT_EQ(loss_counters, 4);
}

// fl-train's step parts and sections: a step reported 0.5 s after it ended (an evaluation in
// between) ends 0.5 s before its event, its forward/backward/gradients/optimizer are slices inside
// it, and setup, eval and checkpoint are slices on the rank's phases track; a section that never
// ended stays open until the history ends.
TEST(Trace, StepPartsAndSectionsAreSlicesWhereTheWorkerTimedThem) {
  const auto dir = root() + "/run";
  {
    FakeRun r(dir, kClean);
    r.ev(0.0, "harness", -1, "run_start", {{"ranks", 1}, {"scenario", "clean"}});
    r.ev(0.2, "rank", 0, "section", {{"name", "setup"}, {"state", "begin"}});
    r.ev(0.7, "rank", 0, "section", {{"name", "setup"}, {"state", "end"}});
    r.ev(1.4, "rank", 0, "section", {{"name", "eval"}, {"state", "begin"}});
    r.ev(1.9, "rank", 0, "section", {{"name", "eval"}, {"state", "end"}});
    r.ev(2.0, "rank", 0, "step",
         {{"step_time_s", 0.4},
          {"reported_after_s", 0.6},
          {"phases",
           {{"forward", 0.0, 0.1},
            {"backward", 0.1, 0.2},
            {"gradients", 0.3, 0.05},
            {"optimizer", 0.35, 0.5}}}},
         0);
    r.ev(2.1, "rank", 0, "section", {{"name", "checkpoint"}, {"state", "begin"}});
    r.ev(3.0, "harness", -1, "run_end", {{"reason", "completed"}});
  }
  TraceEvents events;
  ASSERT_NO_FATAL_FAILURE(sort_trace_events(run_trace(dir), &events));
  auto span = [&](const std::string& name) {
    const auto* s = find_slice(events, 1, name);
    EXPECT_NE(s, nullptr) << name;
    if (s == nullptr) return std::pair{-1.0, -1.0};
    return std::pair{(*s)["ts"].get<double>(),
                     (*s)["ts"].get<double>() + (*s)["dur"].get<double>()};
  };
  auto near = [](std::pair<double, double> got, double a, double b) {
    EXPECT_NEAR(got.first, a, 1) << "starts at " << got.first << " us, not " << a;
    EXPECT_NEAR(got.second, b, 1) << "ends at " << got.second << " us, not " << b;
  };
  near(span("step 0"), 1.0e6, 1.4e6);
  near(span("forward"), 1.0e6, 1.1e6);
  near(span("backward"), 1.1e6, 1.3e6);
  near(span("gradients"), 1.3e6, 1.35e6);
  near(span("optimizer"), 1.35e6, 1.4e6);  // clipped to the step it belongs to
  near(span("setup"), 0.2e6, 0.7e6);
  near(span("eval"), 1.4e6, 1.9e6);
  near(span("checkpoint (never ended)"), 2.1e6, 3.0e6);
  for (const char* part : {"forward", "backward", "gradients", "optimizer"}) {
    EXPECT_EQ((*find_slice(events, 1, part))["tid"], (*find_slice(events, 1, "step 0"))["tid"]);
  }
  EXPECT_NE((*find_slice(events, 1, "eval"))["tid"], (*find_slice(events, 1, "step 0"))["tid"]);
}

TEST(Trace, RefusesADirectoryWithoutHistory) {
  const auto dir = root();
  EXPECT_THROW(run_trace(dir), Error);
}

// The text exposition format, checked line by line: HELP and TYPE once per family and before its
// samples, samples of a family together, names and labels well formed, values parse.
std::map<std::string, std::map<std::string, double>> parse_exposition(const std::string& text) {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kSample(
      R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})? (\S+))re");
  std::map<std::string, std::map<std::string, double>> out;  // name -> labels -> value
  std::map<std::string, std::string> types;
  std::set<std::string> closed;
  std::string current;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_FALSE(line.empty()) << "blank line";
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream ls(line.substr(7));
      std::string name, rest;
      ls >> name >> rest;
      EXPECT_TRUE(std::regex_match(name, kName)) << line;
      if (line[2] == 'T') {
        EXPECT_FALSE(types.count(name)) << "TYPE twice: " << line;
        EXPECT_TRUE(rest == "gauge" || rest == "counter" || rest == "summary" ||
                    rest == "histogram" || rest == "untyped")
            << line;
        types[name] = rest;
      }
      if (name != current) {
        EXPECT_FALSE(closed.count(name)) << "family split: " << name;
        if (!current.empty()) closed.insert(current);
        current = name;
      }
      continue;
    }
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, kSample)) << line;
    if (m.empty()) continue;
    std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_sum", "_count"}) {
      const std::string s = suffix;
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          types.count(family.substr(0, family.size() - s.size()))) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    EXPECT_EQ(family, current) << "sample outside its family: " << line;
    EXPECT_TRUE(types.count(family)) << "no TYPE before " << line;
    const std::string v = m[4];
    double value = 0;
    if (v == "NaN" || v == "+Inf" || v == "-Inf") {
      value = v == "NaN" ? std::nan("") : (v[0] == '+' ? HUGE_VAL : -HUGE_VAL);
    } else {
      size_t used = 0;
      value = std::stod(v, &used);
      EXPECT_EQ(used, v.size()) << line;
    }
    out[name][m[3]] = value;
  }
  return out;
}

TEST(Metrics, SuiteResultsInTheTextExpositionFormat) {
  const auto suite = root() + "/suite";
  {
    // Two faulty runs of 4.11 (one reproduced at 4.0 s, one not) and a clean fix variant.
    FakeRun pos(suite + "/runs/hang-s1", kHang);
    write_timeline(pos);
    FakeRun clean(suite + "/runs/hang-fix-s1", kClean);
    clean.ev(0.0, "harness", -1, "run_start", {{"ranks", 2}, {"scenario", "clean"}});
    clean.ev(0.1, "harness", -1, "tool_start", {{"tool", "hang"}, {"name", "hang"}});
    clean.ev(0.1, "harness", 0, "launch", {{"argv", {"fl-train"}}});
    clean.ev(3600.0 * 0.5, "harness", -1, "run_end", {{"reason", "completed"}});
  }
  nlohmann::json summary = {
      {"suite", "nightly \"q\""},
      {"wall_s", 12.5},
      {"counts", {{"pass", 2}, {"fail", 1}, {"error", 0}}},
      {"provenance", {{"commit", "abc123"}, {"hostname", "vm"}, {"started", "t"}}},
      {"cases",
       {{{"symptom", "4.11"},
         {"variant", "faulty"},
         {"outcome", "pass"},
         {"manifested_s", 4.0},
         {"run_dir", suite + "/runs/hang-s1"}},
        {{"symptom", "4.11"}, {"variant", "faulty"}, {"outcome", "fail"}, {"manifested_s", -1.0}},
        {{"symptom", "4.11"},
         {"variant", "fix"},
         {"outcome", "pass"},
         {"manifested_s", -1.0},
         {"run_dir", suite + "/runs/hang-fix-s1"}}}}};
  std::ofstream(suite + "/summary.json") << summary.dump();

  const std::string text = prometheus_metrics({suite});
  const auto m = parse_exposition(text);
  const std::string s = R"(suite="nightly \"q\"")";  // label values escaped
  ASSERT_TRUE(m.count("faultline_suite_runs")) << text;
  EXPECT_EQ(m.at("faultline_suite_runs").at(s + R"(,outcome="fail")"), 1);
  EXPECT_EQ(m.at("faultline_suite_wall_seconds").at(s), 12.5);
  EXPECT_DOUBLE_EQ(m.at("faultline_reproduction_ratio").at(s + R"(,symptom="4.11")"), 0.5);
  EXPECT_DOUBLE_EQ(m.at("faultline_fix_verified_ratio").at(s + R"(,symptom="4.11")"), 1.0);
  EXPECT_DOUBLE_EQ(
      m.at("faultline_time_to_symptom_seconds").at(s + R"(,symptom="4.11",quantile="0.5")"), 4.0);
  EXPECT_EQ(m.at("faultline_time_to_symptom_seconds_count").at(s + R"(,symptom="4.11")"), 1);
  // The hang detector spoke 0.6 s after the SIGSTOP on the one positive run.
  const std::string d = s + R"(,detector="hang")";
  EXPECT_DOUBLE_EQ(m.at("faultline_detector_recall").at(d), 1.0);
  EXPECT_NEAR(m.at("faultline_detector_latency_seconds").at(d + R"(,quantile="0.5")"), 0.6, 1e-9);
  EXPECT_EQ(m.at("faultline_detector_runs").at(d + R"(,class="positive")"), 1);
}

TEST(Metrics, ASuiteWithoutASummaryIsAnError) {
  EXPECT_ANY_THROW(prometheus_metrics({root()}));
}

}  // namespace
}  // namespace fl::harness
