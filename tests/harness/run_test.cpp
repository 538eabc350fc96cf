// The harness end to end: 8 ranks under both launchers, a hang reproduced and its fix, history
// replay, signal faults and live arming over the Control API, telemetry drop accounting, and a
// teardown that leaves nothing behind when the harness itself is SIGKILLed.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sstream>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "harness/control/controller.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "harness/run/runner.hpp"
#include "injector/site.hpp"
#include "kernels/device.hpp"
#include "tests/support/process.hpp"
#include "workloads/telemetry/telemetry.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
const std::string kExamples = FAULTLINE_SOURCE_DIR "/scenarios/clean/";
const std::string kSymptoms = FAULTLINE_SOURCE_DIR "/scenarios/symptoms/";

struct CliRun {
  test::ProcessResult proc;
  std::string dir;
  nlohmann::json verdict;
};

CliRun cli_run(const std::string& results, const std::string& scenario,
               std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{FAULTLINE_CLI, "run", scenario, "--results", results};
  for (auto& e : extra) argv.push_back(e);
  CliRun r;
  r.proc = test::run_process(argv, {}, std::chrono::seconds(120));
  for (auto& e : fs::directory_iterator(results)) {
    if (!fs::exists(e.path() / "verdict.json")) continue;
    if (r.dir.empty() || fs::last_write_time(e.path() / "history.jsonl") >
                             fs::last_write_time(fs::path(r.dir) / "history.jsonl")) {
      r.dir = e.path().string();
    }
  }
  if (!r.dir.empty()) {
    std::ifstream in(r.dir + "/verdict.json");
    r.verdict = nlohmann::json::parse(in);
  }
  return r;
}

std::string results_dir() {
  return test::fresh_test_dir("harness",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

TEST(HarnessRun, SurvivorsOfAFailedRankAreTornDownAfterTheGrace) {
  // Rank 0 times out in the first collective; rank 1 is still in its 30 s plugin import (a
  // survivor that would not end by itself soon). The harness tears it down once the grace (10 s
  // here) has passed, instead of waiting for it or for the run timeout.
  const auto results = results_dir();
  fs::create_directories(results);
  const std::string yaml = results + "/survivor.yaml";
  {
    std::ifstream in(kSymptoms + "2.2-first-collective-timeout.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    const auto at = s.find("delay(4000)");
    ASSERT_NE(at, std::string::npos);
    s.replace(at, 11, "delay(30000)");
    std::ofstream(yaml) << s;
  }
  auto r = cli_run(results, yaml);
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  bool torn = false;
  for (const auto& e : read_history(r.dir + "/history.jsonl")) {
    if (e.kind != "teardown_after_failure") continue;
    torn = true;
    auto d = nlohmann::json::parse(e.data_json);
    EXPECT_EQ(d["failed_rank"], 0);
    EXPECT_EQ(d["killed"], nlohmann::json::array({1}));
    EXPECT_EQ(d["grace_s"], 10.0);
  }
  EXPECT_TRUE(torn) << r.proc.output;
}

TEST(HarnessRun, EightRanksUnderBothLaunchers) {
  for (const char* launcher : {"local", "mpirun"}) {
    const auto results = test::removed_at_exit(results_dir() + "-" + launcher).string();
    fs::create_directories(results);
    auto r = cli_run(results, kExamples + "clean-dp2-tp2.yaml",
                     {"--set", "topology.ranks=8", "--set", "topology.dp=4", "--set",
                      std::string("topology.launcher=") + launcher, "--set", "workload.steps=4"});
    ASSERT_EQ(r.proc.exit_code, 0) << launcher << "\n" << r.proc.output;
    EXPECT_EQ(r.verdict["outcome"], "pass");
    EXPECT_NE(r.proc.output.find("all 8 ranks finished cleanly (last step 3)"), std::string::npos)
        << r.proc.output;
    // Every rank: a hello and its steps streamed, its own log and event file.
    std::set<int> hello, stepped;
    for (const auto& e : read_history(r.dir + "/history.jsonl")) {
      if (e.source == "rank" && e.kind == "hello") hello.insert(e.rank);
      if (e.source == "rank" && e.kind == "step" && e.step == 3) stepped.insert(e.rank);
    }
    EXPECT_EQ(hello.size(), 8u) << launcher;
    EXPECT_EQ(stepped.size(), 8u) << launcher;
    for (int rank = 0; rank < 8; ++rank) {
      EXPECT_TRUE(fs::exists(fmt::format("{}/ranks/rank{}/events.jsonl", r.dir, rank)));
    }
    EXPECT_TRUE(fs::file_size(r.dir + "/ranks/rank0/output.log") > 0);
    EXPECT_FALSE(fs::exists(r.dir + "/tmp"));
    fs::remove_all(results);
  }
}

TEST(HarnessRun, UnevenShardsHangIsReproducedAndTheFixClearsIt) {
  const auto results = results_dir();
  fs::create_directories(results);
  auto hang = cli_run(results, kSymptoms + "4.11-uneven-batches-hang.yaml");
  ASSERT_EQ(hang.proc.exit_code, 0) << hang.proc.output;
  EXPECT_EQ(hang.verdict["outcome"], "pass");
  EXPECT_EQ(hang.verdict["oracle"], "hang");
  EXPECT_EQ(hang.verdict["step"], 3);
  // The hang watchdog stopped the run once the hang was established, not its 60 s run timeout
  // (how many seconds that took depends on the machine's load).
  std::string stopped_by;
  for (const auto& e : read_history(hang.dir + "/history.jsonl")) {
    if (e.kind == "watchdog_stop")
      stopped_by = nlohmann::json::parse(e.data_json).value("reason", "");
  }
  EXPECT_EQ(stopped_by, "hang established") << hang.proc.output;
  // Re-judging the history offline gives the same verdict.
  auto again = judge_run_dir(hang.dir);
  EXPECT_EQ(again.to_json()["outcome"], hang.verdict["outcome"]);
  EXPECT_EQ(again.explanation, hang.verdict["explanation"]);
  EXPECT_EQ(again.ranks, hang.verdict["ranks"].get<std::vector<int>>());

  auto fixed = cli_run(results, kSymptoms + "4.11-uneven-batches-hang.yaml", {"--fix"});
  ASSERT_EQ(fixed.proc.exit_code, 0) << fixed.proc.output;
  // The fix variant: the hang oracle finds nothing and every rank finishes.
  EXPECT_EQ(fixed.verdict["oracle"], "hang");
  EXPECT_EQ(fixed.verdict["outcome"], "pass");
  EXPECT_NE(fixed.verdict["explanation"].get<std::string>().find("not observed"),
            std::string::npos);
  EXPECT_EQ(fixed.verdict["fix"], true);
  fs::remove_all(results);
}

TEST(HarnessRun, FailedExpectationExitsOneAndBadInputExitsTwo) {
  const auto results = results_dir();
  fs::create_directories(results);
  // The clean scenario expecting a hang: the oracle does not see one.
  auto r = cli_run(results, kExamples + "clean-dp2-tp2.yaml",
                   {"--set", "expect.oracle=hang", "--set", "expect.hang_s=30"});
  EXPECT_EQ(r.proc.exit_code, 1) << r.proc.output;
  EXPECT_EQ(r.verdict["outcome"], "fail");
  auto bad = test::run_process(
      {FAULTLINE_CLI, "run", kExamples + "clean-dp2-tp2.yaml", "--set", "topology.ranks=0"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("topology.ranks: 0 is out of range (allowed 1-256)"), std::string::npos)
      << bad.output;
  fs::remove_all(results);
}

// A GPU scenario where no GPU is visible is an input error naming the file and the device, not a
// run that "reproduces" a device error; with workload.device=cpu the same file runs on CPU ranks
// and its ranks are launched with --device cpu.
TEST(HarnessRun, GpuScenarioWithoutAGpuIsAnInputError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const std::string file = FAULTLINE_SOURCE_DIR "/scenarios/gpu/4.2-device-memory-oom.yaml";
  auto refused = test::run_process({FAULTLINE_CLI, "run", file});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find(file + ": workload.device is cuda but no CUDA device is visible "
                                       "on this machine"),
            std::string::npos)
      << refused.output;
  const auto results = results_dir();
  fs::create_directories(results);
  auto cpu =
      cli_run(results, file,
              {"--set", "workload.device=cpu", "--set", "expect.pattern=out of memory on cpu"});
  EXPECT_EQ(cpu.proc.exit_code, 0) << cpu.proc.output;  // the same OOM, on a CPU rank
  EXPECT_EQ(cpu.verdict["outcome"], "pass");
  std::ifstream hist(cpu.dir + "/history.jsonl");
  const std::string h((std::istreambuf_iterator<char>(hist)), std::istreambuf_iterator<char>());
  EXPECT_NE(h.find("\"--device\",\"cpu\""), std::string::npos);
  EXPECT_NE(h.find("out of memory on cpu"), std::string::npos);
  fs::remove_all(results);
}

TEST(HarnessRun, SignalFaultAtAStepAndLiveArmingThroughControl) {
  const auto results = results_dir();
  fs::create_directories(results);
  // SIGKILL to rank 1 once it reports step 2: the rank ends by signal; the others time out.
  auto s = load_scenario(
      kExamples + "clean-dp2-tp2.yaml",
      {false,
       {"workload.steps=400", "expect.oracle=exit_class", "expect.exit_class=signal",
        "expect.ranks=[1]", "faults=[{signal: KILL, rank: 1, step: 2}]", "timeouts.comm_ms=3000"}});
  RunOptions o;
  o.results_dir = results;
  o.print_summary = false;
  auto r = run_scenario(s, o);
  EXPECT_EQ(r.verdict.outcome, "pass") << r.verdict.explanation;
  EXPECT_EQ(r.verdict.ranks, std::vector<int>{1});

  // Live: once rank 2 has stepped, arm a crash on its optimizer step over the Control API.
  auto live =
      load_scenario(kExamples + "clean-dp2-tp2.yaml",
                    {false,
                     {"workload.steps=400", "expect.oracle=exit_class", "expect.exit_class=crash",
                      "expect.ranks=[2]", "timeouts.comm_ms=3000"}});
  std::thread client;
  std::string reply_msg, list_msg;
  bool reply_ok = false;
  o.on_ready = [&](const std::string& addr, const std::string& dir) {
    client = std::thread([&, addr, dir] {
      for (int i = 0; i < 400; ++i) {
        std::ifstream in(dir + "/history.jsonl");
        std::string text((std::istreambuf_iterator<char>(in)), {});
        if (text.find("\"kind\":\"step\",\"step\":2") != std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
      auto stub = faultline::v1::Controller::NewStub(
          grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
      faultline::v1::ControlRequest req;
      req.set_action("arm_faults");
      req.set_rank(2);
      req.set_plan("optimizer.step=crash(SEGV)");
      faultline::v1::ControlReply rep;
      std::string secret;
      std::ifstream(dir + "/control.secret") >> secret;
      grpc::ClientContext ctx;
      ctx.AddMetadata(kControlSecretHeader, secret);
      if (stub->Control(&ctx, req, &rep).ok()) {
        reply_ok = rep.ok();
        reply_msg = rep.message();
      }
      faultline::v1::ControlRequest list;
      list.set_action("list_faults");
      grpc::ClientContext ctx2;
      ctx2.AddMetadata(kControlSecretHeader, secret);
      if (stub->Control(&ctx2, list, &rep).ok() && rep.faults_size() > 0) list_msg = rep.faults(0);
    });
  };
  auto r2 = run_scenario(live, o);
  client.join();
  EXPECT_TRUE(reply_ok) << reply_msg;
  EXPECT_EQ(list_msg, "optimizer.step=crash(SEGV)");
  EXPECT_EQ(r2.verdict.outcome, "pass") << r2.verdict.explanation;
  EXPECT_EQ(r2.verdict.ranks, std::vector<int>{2});
  bool fired = false;
  for (const auto& e : read_history(r2.run_dir + "/history.jsonl")) {
    fired |= e.kind == "fault_fired" && e.rank == 2;
  }
  EXPECT_TRUE(fired);
  fs::remove_all(results);
}

// Processes whose environment names this run (workers, their helpers).
std::vector<pid_t> processes_of_run(const std::string& run_id) {
  std::vector<pid_t> out;
  const std::string needle = "FAULTLINE_RUN_ID=" + run_id;
  for (auto& e : fs::directory_iterator("/proc")) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
    if (pid <= 0) continue;
    std::ifstream in(e.path() / "environ");
    std::string env((std::istreambuf_iterator<char>(in)), {});
    if (env.find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

int zombies_named(const std::set<std::string>& names) {
  int n = 0;
  for (auto& e : fs::directory_iterator("/proc")) {
    if (std::atoi(e.path().filename().c_str()) <= 0) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    std::getline(in, stat);
    const auto lp = stat.find('('), rp = stat.rfind(')');
    if (lp == std::string::npos || rp == std::string::npos || rp + 2 >= stat.size()) continue;
    if (stat[rp + 2] == 'Z' && names.count(stat.substr(lp + 1, rp - lp - 1))) ++n;
  }
  return n;
}

std::set<std::string> tmp_entries() {
  std::set<std::string> s;
  for (auto& e : fs::directory_iterator(fs::temp_directory_path())) s.insert(e.path().string());
  return s;
}

// Files of `dir` mapped into the memory of the run's processes (their shared-memory segments).
std::set<std::string> mapped_under(const std::string& run_id, const std::string& dir) {
  std::set<std::string> out;
  for (pid_t pid : processes_of_run(run_id)) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(in, line);) {
      const auto at = line.find(dir);
      if (at != std::string::npos) out.insert(line.substr(at));
    }
  }
  return out;
}

// Every distinct rank event (rank, seq, the rank's time stamp, kind) of a history file and of
// the ranks' own event files.
using RankEvent = std::tuple<int, uint64_t, int64_t, std::string>;
std::set<RankEvent> rank_events_in_history(const std::string& run_dir) {
  std::set<RankEvent> out;
  for (const auto& e : read_history(run_dir + "/history.jsonl")) {
    if (e.source == "rank") out.insert({e.rank, e.seq, e.time_unix_ns, e.kind});
  }
  return out;
}
std::set<RankEvent> rank_events_in_files(const std::string& run_dir) {
  std::set<RankEvent> out;
  for (int r = 0; fs::exists(run_dir + "/ranks/rank" + std::to_string(r)); ++r) {
    std::ifstream in(run_dir + "/ranks/rank" + std::to_string(r) + "/events.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      out.insert({r, j.value("seq", uint64_t{0}), j.value("time_unix_ns", int64_t{0}),
                  j.value("kind", "")});
    }
  }
  return out;
}

// Starts `faultline run` of a clean run too long to end by itself under `launcher`, as run `id`.
pid_t start_long_run(const std::string& results, const std::string& id, const char* launcher) {
  const pid_t harness = ::fork();
  if (harness == 0) {
    ::freopen("/dev/null", "r", stdin);
    ::freopen("/dev/null", "w", stdout);
    ::execl(FAULTLINE_CLI, FAULTLINE_CLI, "run", (kExamples + "clean-dp2-tp2.yaml").c_str(),
            "--results", results.c_str(), "--run-id", id.c_str(), "--set", "workload.steps=100000",
            "--set", (std::string("topology.launcher=") + launcher).c_str(), nullptr);
    ::_exit(127);
  }
  return harness;
}

// Whether the history at `hist` records step 3 within 600 looks, 20 ms apart.
bool reaches_step_3(const std::string& hist) {
  bool stepping = false;
  for (int i = 0; i < 600 && !stepping; ++i) {
    std::ifstream in(hist);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    stepping = text.find("\"kind\":\"step\",\"step\":3") != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return stepping;
}

// The files run `id` maps from /dev/shm and from its own `run_tmp`, looked at until one of them
// shows up (under mpirun the segments come a little after the first steps).
std::pair<std::set<std::string>, std::set<std::string>> shared_memory_of_run(
    const std::string& id, const std::string& run_tmp, bool mpirun) {
  std::set<std::string> in_shm, in_run;
  for (int i = 0; i < 100; ++i) {
    in_shm = mapped_under(id, "/dev/shm/");
    in_run = mapped_under(id, run_tmp);
    if (!in_shm.empty() || !in_run.empty() || !mpirun) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return {in_shm, in_run};
}

// The processes of run `id` still there after up to 5 s.
std::vector<pid_t> processes_left_of_run(const std::string& id) {
  std::vector<pid_t> left;
  for (int i = 0; i < 100; ++i) {
    left = processes_of_run(id);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return left;
}

// Zombies of the run's programs left once this process (their subreaper) has reaped for up to 5 s.
int zombies_after_reaping() {
  int zombies = 0;
  for (int i = 0; i < 100; ++i) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    zombies = zombies_named({"fl-train", "orted", "mpirun", "ompi-server", "faultline"});
    if (zombies == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return zombies;
}

// Entries of the system temp directory that were not there `before`, other than test directories.
std::vector<std::string> tmp_entries_added(const std::set<std::string>& before) {
  std::vector<std::string> added;
  for (auto& a : tmp_entries()) {
    // Test directories of tests running alongside (fresh_test_dir: faultline-<what>-<pid>-...)
    // are theirs, not the run's.
    if (!before.count(a) && fs::path(a).filename().string().rfind("faultline-", 0) != 0) {
      added.push_back(a);
    }
  }
  return added;
}

// `faultline verdict` judges the history with the ranks' own files merged in: every rank event
// on disk, each once.
void expect_verdict_counts_every_rank_event(const std::string& run_dir, const char* launcher) {
  const auto in_history = rank_events_in_history(run_dir);
  const auto in_files = rank_events_in_files(run_dir);
  std::set<RankEvent> all = in_history;
  all.insert(in_files.begin(), in_files.end());
  size_t missing = 0;
  for (const auto& e : in_files) missing += in_history.count(e) ? 0 : 1;
  auto v = test::run_process({FAULTLINE_CLI, "verdict", "--json", run_dir});
  const auto brace = v.output.find('{');
  ASSERT_NE(brace, std::string::npos) << v.output;
  const auto j = nlohmann::json::parse(v.output.substr(brace), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << v.output;
  EXPECT_EQ(j["rank_events"].get<size_t>(), all.size()) << launcher;
  EXPECT_EQ(j["recovered_from_rank_files"].get<size_t>(), missing) << launcher;
  std::printf("%s: %zu rank events in the history, %zu in the ranks' files, %zu only there\n",
              launcher, in_history.size(), in_files.size(), missing);
  std::fflush(stdout);  // (the next fork would print it again)
}

TEST(HarnessRun, SigkillOfTheHarnessLeavesNoWorkerZombieOrTempFile) {
  const auto results = results_dir();
  fs::create_directories(results);
  // Stand in for init: orphans of the killed harness come to this process, which reaps them (a
  // container's PID 1 may reap late, which would read as zombies the run left).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  for (const char* launcher : {"local", "mpirun"}) {
    const auto before = tmp_entries();
    const std::string id = std::string("sigkill-") + launcher;
    const pid_t harness = start_long_run(results, id, launcher);
    const std::string hist = results + "/" + id + "/history.jsonl";
    ASSERT_TRUE(reaches_step_3(hist)) << launcher;
    ASSERT_FALSE(processes_of_run(id).empty());
    // No shared memory of the run in /dev/shm (Open MPI's vader segments would be there by
    // default, and nobody unlinks them after a SIGKILL): under mpirun they are in the run's tmp.
    const std::string run_tmp = results + "/" + id + "/tmp/";
    const auto [in_shm, in_run] =
        shared_memory_of_run(id, run_tmp, std::string(launcher) == "mpirun");
    EXPECT_TRUE(in_shm.empty()) << launcher << ": " << *in_shm.begin();
    if (std::string(launcher) == "mpirun") {
      EXPECT_FALSE(in_run.empty()) << "no shared-memory segment of the run in " << run_tmp;
    }
    ::kill(harness, SIGKILL);
    ::waitpid(harness, nullptr, 0);
    const auto left = processes_left_of_run(id);
    EXPECT_TRUE(left.empty()) << launcher << ": " << left.size() << " processes of the run remain";
    // Every process of the run ended (none is stuck in D or T state holding on), so reaping them
    // leaves no zombie behind.
    EXPECT_EQ(zombies_after_reaping(), 0) << launcher;
    // Nothing new in the system temp directory.
    const auto added = tmp_entries_added(before);
    EXPECT_TRUE(added.empty()) << launcher << ": " << (added.empty() ? "" : added[0]);
    // The run directory stays readable: the history parses.
    EXPECT_FALSE(read_history(hist).empty());
    for (const auto& f : in_shm) EXPECT_FALSE(fs::exists(f)) << launcher << ": " << f << " left";
    ASSERT_NO_FATAL_FAILURE(expect_verdict_counts_every_rank_event(results + "/" + id, launcher));
  }
  fs::remove_all(results);
}

// A SIGTERM to the harness mid-run: torn down as usual, but the outcome is `interrupted`
// everywhere (verdict.json, the summary, the exit status, `faultline verdict`).
TEST(HarnessRun, SigtermMidRunGivesTheOutcomeInterrupted) {
  const auto results = results_dir();
  fs::create_directories(results);
  const std::string id = "sigterm", out = results + "/harness.out";
  const pid_t harness = ::fork();
  if (harness == 0) {
    ::freopen("/dev/null", "r", stdin);
    ::freopen(out.c_str(), "w", stdout);
    ::execl(FAULTLINE_CLI, FAULTLINE_CLI, "run", (kExamples + "clean-dp2-tp2.yaml").c_str(),
            "--results", results.c_str(), "--run-id", id.c_str(), "--set", "workload.steps=100000",
            "--set", "topology.launcher=mpirun", nullptr);
    ::_exit(127);
  }
  const std::string dir = results + "/" + id;
  bool stepping = false;
  for (int i = 0; i < 1500 && !stepping; ++i) {
    std::ifstream in(dir + "/history.jsonl");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    stepping = text.find("\"kind\":\"step\"") != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(stepping);
  ::kill(harness, SIGTERM);
  int st = 0;
  ::waitpid(harness, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "the harness died of the signal instead of handling it";
  EXPECT_EQ(WEXITSTATUS(st), 4);
  std::ifstream vin(dir + "/verdict.json");
  const auto v = nlohmann::json::parse(vin);
  EXPECT_EQ(v["outcome"], "interrupted");
  EXPECT_EQ(v["state"], "done");
  EXPECT_NE(v["explanation"].get<std::string>().find("the harness got SIGTERM at"),
            std::string::npos)
      << v.dump();
  std::ifstream oin(out);
  const std::string printed((std::istreambuf_iterator<char>(oin)), {});
  EXPECT_NE(printed.find("  verdict    interrupted: the harness got SIGTERM before the run "
                         "ended; no verdict (oracle completed)"),
            std::string::npos)
      << printed;
  auto again = test::run_process({FAULTLINE_CLI, "verdict", dir});
  EXPECT_EQ(again.exit_code, 4) << again.output;
  EXPECT_EQ(again.output.rfind("interrupted (oracle completed): the harness got SIGTERM", 0), 0u)
      << again.output;
  fs::remove_all(results);
}

TEST(Telemetry, BoundedQueueCountsEveryDropAndTheFileKeepsEverything) {
  const auto dir = results_dir();
  fs::create_directories(dir);
  History history(dir + "/history.jsonl");
  Controller ctl(
      history, [](const ControlAction&) { return ControlResult{}; }, "telemetry-test");
  const std::string addr = ctl.start("127.0.0.1:0");
  ::setenv(kControlSecretEnv, "telemetry-test", 1);  // what the harness gives its ranks
  telemetry::Options o;
  o.events_file = dir + "/events.jsonl";
  o.control_addr = addr;
  o.queue_size = 8;  // tiny: a burst must overflow it
  o.heartbeat_ms = 0;
  telemetry::start(5, std::move(o));
  constexpr int kEvents = 20000;
  for (int i = 0; i < kEvents; ++i) telemetry::emit("step", nlohmann::json::object(), i);
  const auto st = telemetry::stats();
  telemetry::stop();
  ::unsetenv(kControlSecretEnv);
  EXPECT_EQ(st.emitted, static_cast<uint64_t>(kEvents));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t got = ctl.events_ingested();
  ctl.shutdown();
  // Drops happened, were counted, and sent + dropped accounts for every event.
  std::ifstream in(dir + "/events.jsonl");
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  EXPECT_EQ(lines, kEvents);
  EXPECT_GT(got, 0u);
  EXPECT_LT(got, static_cast<uint64_t>(kEvents));
  const auto drops = ctl.dropped();
  ASSERT_TRUE(drops.count(5));
  // The last batch carries the drop count as of its sending; drops after it are in the file.
  EXPECT_GT(drops.at(5), 0u);
  EXPECT_LE(got + drops.at(5), static_cast<uint64_t>(kEvents));
  EXPECT_EQ(ctl.received().at(5).size(), got);
  fs::remove_all(dir);
}

// An inference's fault-plan steps are negative while it reads the prompt; its events (a fault
// that fired there, a collective) must still be events the history takes: step -1, none.
TEST(Telemetry, EventsWhileTheInjectorStepIsNegativeCarryStepMinusOne) {
  const auto dir = results_dir();
  fs::create_directories(dir);
  History history(dir + "/history.jsonl");
  Controller ctl(
      history, [](const ControlAction&) { return ControlResult{}; }, "telemetry-test");
  const std::string addr = ctl.start("127.0.0.1:0");
  ::setenv(kControlSecretEnv, "telemetry-test", 1);
  telemetry::Options o;
  o.events_file = dir + "/events.jsonl";
  o.control_addr = addr;
  o.heartbeat_ms = 0;
  telemetry::start(2, std::move(o));
  fault::set_step(-5);
  telemetry::emit("fault_fired", {{"site", "infer.forward"}, {"plan_step", -5}});
  fault::set_step(3);
  telemetry::emit("fault_fired", {{"site", "infer.forward"}});
  fault::set_step(0);
  telemetry::stop();
  ::unsetenv(kControlSecretEnv);
  ctl.shutdown();
  std::ifstream in(dir + "/events.jsonl");
  std::vector<int64_t> steps;
  for (std::string l; std::getline(in, l);) steps.push_back(nlohmann::json::parse(l)["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{-1, 3}));
  fs::remove_all(dir);
}
}  // namespace
}  // namespace fl::harness
