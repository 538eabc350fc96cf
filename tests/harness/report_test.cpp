// Reports: a run's HTML report rendered in headless Chromium (lanes, markers at the right steps,
// no script errors, a screenshot saved with the run), a suite's catalogue grid, and the suite
// diff a nightly job fails on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"
#include "harness/report/report.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = FAULTLINE_SOURCE_DIR;

std::string test_dir() {
  return test::fresh_test_dir("report",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (fs::exists(p)) return p;
  }
  return "";
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The run: rank 1 killed at step 5, the memory detector's diagnosis, the restart policy's action.
std::string recovered_run(const std::string& results) {
  auto r = test::run_process(
      {FAULTLINE_CLI, "run", kSrc + "/scenarios/recovery/killed-rank-restart.yaml", "--results",
       results, "--detector", "memory"},
      {}, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (auto& e : fs::directory_iterator(results)) return e.path().string();
  return "";
}

TEST(Report, RunReportRendersInHeadlessChromium) {
  const auto dir = test_dir();
  const std::string run = recovered_run(dir);
  ASSERT_FALSE(run.empty());
  auto r = test::run_process({FAULTLINE_CLI, "report", run});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = read(run + "/report.html");
  // Self-contained: nothing fetched from the network.
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src=\""), std::string::npos);
  // Where the diagnosis should be: the step rank 1 had reached when it was killed.
  int64_t kill_step = -1;
  for (auto& e : read_history(run + "/history.jsonl")) {
    if (e.kind == "fault_injected")
      kill_step = nlohmann::json::parse(e.data_json).value("at_step", -1);
  }
  ASSERT_GE(kill_step, 5);
  const std::string browser = chromium();
  if (browser.empty()) {
    if (std::getenv("CI")) FAIL() << "chromium is not installed (ci/install-deps.sh installs it)";
    GTEST_SKIP() << "chromium is not installed";
  }
  const std::string url = "file://" + run + "/report.html";
  const std::vector<std::string> flags{
      browser,         "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
      "--no-first-run"};
  auto args = flags;
  args.insert(args.end(), {"--dump-dom", url});
  auto dom = test::run_process(args, {{"HOME", dir}}, std::chrono::seconds(90));
  ASSERT_EQ(dom.exit_code, 0) << dom.output.substr(0, 2000);
  const std::string& d = dom.output;
  EXPECT_NE(d.find("data-ready=\"1\""), std::string::npos) << "the page script did not finish";
  EXPECT_NE(d.find("data-script-errors=\"0\""), std::string::npos)
      << std::regex_replace(d.substr(0, 400), std::regex("\n"), " ");
  EXPECT_EQ(count(d, "class=\"lane-row\""), 2);
  EXPECT_NE(d.find("2 lanes,"), std::string::npos);  // the script counted them
  // The SIGKILL is a one-shot fault: an instant on rank 1's lane at the step it was sent.
  std::smatch f;
  ASSERT_TRUE(std::regex_search(
      d, f, std::regex(R"re(class="fault-fired" data-rank="1" data-step="(\d+)")re")));
  EXPECT_EQ(std::stoll(f[1]), kill_step);
  EXPECT_GE(count(d, "class=\"action\""), 2);  // restart_job and the restart
  // The memory detector's diagnosis sits on rank 1's lane at the step it was killed at.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      d, m, std::regex(R"re(class="diagnosis" data-rank="1" data-step="(\d+)")re")))
      << "no diagnosis marker on rank 1";
  EXPECT_NEAR(std::stoll(m[1]), kill_step, 1);
  EXPECT_GE(count(d, "class=\"step\" data-rank=\"0\""), 12);
  EXPECT_EQ(count(d, "class=\"chart\""), 4);
  // A screenshot saved with the run.
  args = flags;
  args.insert(args.end(), {"--screenshot=" + run + "/report.png", "--window-size=1300,1500",
                           "--hide-scrollbars", url});
  auto shot = test::run_process(args, {{"HOME", dir}}, std::chrono::seconds(90));
  ASSERT_EQ(shot.exit_code, 0) << shot.output.substr(0, 2000);
  ASSERT_TRUE(fs::exists(run + "/report.png"));
  EXPECT_GT(fs::file_size(run + "/report.png"), 20000u);
}

// fl-train's timings in a real run's trace (issue 36): inside each step on rank 0, forward then
// backward, gradients and optimizer, nested in it and in that order; setup, eval and checkpoint
// (saves, and the restarted job's load) as slices on the rank's phases track.
TEST(Trace, ARealTrainingRunShowsItsStepPartsAndSectionsAsSlices) {
  const auto dir = test_dir();
  std::ofstream(dir + "/phases.yaml")
      << "name: phases\ntopology: {ranks: 2, dp: 2}\n"
         "workload: {steps: 6, eval_every: 2, grad_accum: 2, checkpoint: {every: 3}}\n"
         "expect: {oracle: completed}\n";
  auto r = test::run_process({FAULTLINE_CLI, "run", dir + "/phases.yaml", "--results",
                              dir + "/runs", "--run-id", "p", "-q"},
                             {}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto trace = run_trace(dir + "/runs/p");
  std::map<std::string, int> sections;
  std::vector<nlohmann::json> steps, parts;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["pid"] != 1) continue;
    const std::string name = e["name"];
    if (e["cat"] == "section") ++sections[name];
    if (e["cat"] == "step") steps.push_back(e);
    if (e["cat"] == "phase") parts.push_back(e);
  }
  EXPECT_EQ(sections, (std::map<std::string, int>{{"checkpoint", 2}, {"eval", 3}, {"setup", 1}}));
  ASSERT_EQ(steps.size(), 6u);
  for (const auto& s : steps) {
    const double t0 = s["ts"], t1 = t0 + s["dur"].get<double>();
    std::vector<std::string> inside;
    double last = t0;
    for (const auto& p : parts) {
      const double a = p["ts"], b = a + p["dur"].get<double>();
      if (a < t0 || b > t1 + 1 || p["tid"] != s["tid"]) continue;
      EXPECT_GE(a + 1, last) << s["name"] << ": " << p["name"] << " starts before the part before";
      last = b;
      inside.push_back(p["name"]);
    }
    EXPECT_EQ(inside, (std::vector<std::string>{"forward", "backward", "forward", "backward",
                                                "gradients", "optimizer"}))
        << s["name"];
  }
}

TEST(Report, SuiteReportShowsTheCatalogueGrid) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/suite");
  std::ofstream(dir + "/suite/s.yaml")
      << "name: two\nscenarios: [\"" << kSrc
      << "/scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml\"]\nfix: true\n";
  auto s = test::run_process(
      {FAULTLINE_CLI, "suite", dir + "/suite/s.yaml", "--results", dir + "/out", "-j", "2"}, {},
      std::chrono::seconds(120));
  ASSERT_EQ(s.exit_code, 0) << s.output;
  std::string suite;
  for (auto& e : fs::directory_iterator(dir + "/out")) suite = e.path().string();
  auto r = test::run_process({FAULTLINE_CLI, "report", suite, "--runs"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string html = read(suite + "/report.html");
  EXPECT_NE(html.find("class=\"cell ok\" data-symptom=\"4.6\""), std::string::npos);
  EXPECT_EQ(count(html, "class=\"cell none\" data-symptom"), 33);  // no scenario for the others
  EXPECT_NE(html.find("report.html\">dtype-mismatch-allreduce</a>"), std::string::npos);
  // Which build on which machine, and its speed while the suite ran.
  const auto prov = html.find("<table id=\"provenance\">");
  ASSERT_NE(prov, std::string::npos);
  EXPECT_NE(html.find("<tr><th>MPI</th><td>Open MPI", prov), std::string::npos);
  EXPECT_NE(html.find("<tr><th>calibration</th><td>", prov), std::string::npos);
  EXPECT_NE(html.find(" GFLOP/s median (single-thread 128x128 float GEMM", prov),
            std::string::npos);
  auto bad = test::run_process({FAULTLINE_CLI, "report", dir});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("neither a run directory"), std::string::npos) << bad.output;
}

nlohmann::json suite_of(std::vector<nlohmann::json> cases) {
  return {{"suite", "t"}, {"cases", cases}};
}
nlohmann::json c(const std::string& name, const std::string& variant, const std::string& outcome,
                 double t = 1.0, double tps = 1000, const std::string& sym = "4.11") {
  return {{"scenario", name}, {"variant", variant}, {"seed", 7},           {"outcome", outcome},
          {"symptom", sym},   {"manifested_s", t},  {"tokens_per_s", tps}, {"explanation", "x"}};
}

TEST(Diff, RegressionsAndNotes) {
  const auto before =
      suite_of({c("a", "faulty", "pass"), c("a", "fix", "pass"), c("b", "faulty", "pass", 1.0),
                c("clean", "faulty", "pass", -1, 5000, ""), c("gone", "faulty", "pass"),
                c("d", "faulty", "fail")});
  const auto after =
      suite_of({c("a", "faulty", "fail"), c("a", "fix", "fail"), c("b", "faulty", "pass", 4.0),
                c("clean", "faulty", "pass", -1, 1000, ""), c("d", "faulty", "pass"),
                c("new", "faulty", "pass")});
  auto d = diff_suites(before, after, {});
  std::map<std::string, DiffEntry> by;
  for (auto& e : d) by[e.kind + ":" + e.scenario] = e;
  EXPECT_TRUE(by.at("stopped_reproducing:a").regression);
  EXPECT_TRUE(by.at("fix_stopped_working:a").regression);
  EXPECT_TRUE(by.at("slower_symptom:b").regression);
  EXPECT_FALSE(by.at("throughput_drop:clean").regression);         // one short run: a note
  EXPECT_TRUE(by.at("suite_throughput_drop:(suite)").regression);  // the only healthy run: 20%
  EXPECT_FALSE(by.at("fixed_again:d").regression);
  EXPECT_FALSE(by.at("missing:gone").regression);
  EXPECT_FALSE(by.at("new:new").regression);
  EXPECT_EQ(d.size(), 8u);
  DiffOptions o;
  o.outcomes_only = true;
  for (auto& e : diff_suites(before, after, o)) {
    EXPECT_NE(e.kind, "slower_symptom");
    EXPECT_NE(e.kind, "throughput_drop");
  }
  // Many healthy runs: one slow run is a note, not a suite regression.
  std::vector<nlohmann::json> b5, a5;
  for (int i = 0; i < 5; ++i) {
    b5.push_back(c("c" + std::to_string(i), "fix", "pass", 1.0, 1000));
    a5.push_back(c("c" + std::to_string(i), "fix", "pass", 1.0, i == 0 ? 300 : 1000));
  }
  auto few = diff_suites(suite_of(b5), suite_of(a5), {});
  ASSERT_EQ(few.size(), 1u);
  EXPECT_EQ(few[0].kind, "throughput_drop");
  EXPECT_FALSE(few[0].regression);
  // Within the thresholds: no entry.
  EXPECT_TRUE(diff_suites(suite_of({c("b", "faulty", "pass", 1.0)}),
                          suite_of({c("b", "faulty", "pass", 2.5)}), {})
                  .empty());
}

TEST(Diff, AMachineBusyWithOtherWorkIsNotARegression) {
  // The same code on a machine three times slower (a CPU hog beside the suite): every run's
  // tokens/s fell to a third and the symptom came 3x later. The reference GEMM measured in the
  // same windows says the machine did too, so nothing regressed.
  auto with_speed = [](nlohmann::json s, double gflops) {
    s["provenance"] = {{"calibration", {{"gflops", gflops}, {"samples", {gflops}}}}};
    return s;
  };
  std::vector<nlohmann::json> before, after;
  for (int i = 0; i < 4; ++i) {
    before.push_back(c("c" + std::to_string(i), "fix", "pass", 2.0, 3000));
    after.push_back(c("c" + std::to_string(i), "fix", "pass", 6.0, 1000));
  }
  const auto busy =
      diff_suites(with_speed(suite_of(before), 9.0), with_speed(suite_of(after), 3.0), {});
  ASSERT_EQ(busy.size(), 1u);
  EXPECT_EQ(busy[0].kind, "machine_speed");
  EXPECT_FALSE(busy[0].regression);
  // Without the reference the same numbers are a regression (what the nightly used to say).
  bool regressed = false;
  for (auto& e : diff_suites(suite_of(before), suite_of(after), {})) regressed |= e.regression;
  EXPECT_TRUE(regressed);
  // Code that got 3x slower on a machine of the same speed still is one.
  regressed = false;
  for (auto& e :
       diff_suites(with_speed(suite_of(before), 9.0), with_speed(suite_of(after), 9.0), {})) {
    regressed |= e.regression;
  }
  EXPECT_TRUE(regressed);
}

TEST(Diff, CommandExitsNonZeroOnARegressionAndNamesBadInput) {
  const auto dir = test_dir();
  std::ofstream(dir + "/old.json") << suite_of({c("a", "faulty", "pass")}).dump();
  std::ofstream(dir + "/new.json") << suite_of({c("a", "faulty", "fail")}).dump();
  auto same = test::run_process({FAULTLINE_CLI, "diff", dir + "/old.json", dir + "/old.json"});
  EXPECT_EQ(same.exit_code, 0) << same.output;
  auto worse = test::run_process({FAULTLINE_CLI, "diff", dir + "/old.json", dir + "/new.json"});
  EXPECT_EQ(worse.exit_code, 1) << worse.output;
  EXPECT_NE(worse.output.find("REGRESSION stopped_reproducing"), std::string::npos) << worse.output;
  std::ofstream(dir + "/bad.json") << "{\"suite\": 1}";
  auto bad = test::run_process({FAULTLINE_CLI, "diff", dir + "/old.json", dir + "/bad.json"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("bad.json: not a suite summary"), std::string::npos) << bad.output;
  // The committed smoke baseline is a valid suite summary.
  auto base = test::run_process({FAULTLINE_CLI, "diff", kSrc + "/results/baselines/smoke.json",
                                 kSrc + "/results/baselines/smoke.json"});
  EXPECT_EQ(base.exit_code, 0) << base.output;
}

}  // namespace
}  // namespace fl::harness
