// workload.kind: command (issue 21), end to end through `faultline run`: a job that is not
// faultline's (tests/harness/probe_job.c, reporting through the probe's C ABI only) gets the
// launch contract, its probe events reach the history, out-of-process faults and the exit-code
// and log oracles act on it; a command that is missing, ends before it reports, or never reports
// is a harness error (exit 2) naming the rank and the command.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "harness/history/history.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

struct Ran {
  test::ProcessResult proc;
  std::string dir;
};

Ran run_yaml(const std::string& yaml) {
  const auto dir = test::fresh_test_dir(
      "command", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  const std::string file = dir + "/s.yaml";
  std::ofstream(file) << yaml;
  Ran r;
  r.proc = test::run_process(
      {FAULTLINE_CLI, "run", file, "--results", dir + "/results", "--run-id", "r"}, {},
      std::chrono::seconds(120));
  r.dir = dir + "/results/r";
  return r;
}

std::string job(const std::string& args) {
  return std::string("[\"") + FAULTLINE_PROBE_JOB + "\"" + args + "]";
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Where the harness starts each rank itself it does what torchrun has done since pytorch PR
// 22501: OMP_NUM_THREADS=1 for every rank of a node that runs several, so their BLAS threads do
// not oversubscribe it. One rank per node, topology.omp_num_threads: unset, or a value the
// scenario gives leave it alone.
TEST(CommandWorkload, RanksSharingANodeGetOneOpenMpThreadUnlessTheScenarioSaysOtherwise) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"topology: {ranks: 2}", "[1]"},
      {"topology: {ranks: 2, omp_num_threads: unset}", "[]"},
      {"topology: {ranks: 2}\nenv: {OMP_NUM_THREADS: \"3\"}", "[3]"},
      {"topology: {ranks: 2, nodes: 2}", "[]"}};
  for (const auto& [topology, want] : cases) {
    auto r = run_yaml("name: omp\n" + topology +
                      "\nworkload: {kind: command, probe: false, command: [\"/bin/sh\", \"-c\", "
                      "\"echo omp=[$OMP_NUM_THREADS]\"]}\nexpect: {oracle: completed}\n");
    ASSERT_EQ(r.proc.exit_code, 0) << topology << "\n" << r.proc.output;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string out = read(r.dir + "/ranks/rank" + std::to_string(rank) + "/output.log");
      EXPECT_NE(out.find("omp=" + want), std::string::npos)
          << topology << " rank " << rank << ": " << out;
    }
    fs::remove_all(fs::path(r.dir).parent_path().parent_path());
  }
}

TEST(CommandWorkload, GetsTheContractAndItsProbeEventsAndExitCodeAreJudged) {
  auto r = run_yaml(
      "name: contract\ntopology: {ranks: 2}\n"
      "workload: {kind: command, command: " +
      job(", \"4\", \"20\", \"3\"") +
      "}\n"
      "expect: {symptom: \"4.8\", oracle: exit_class, exit_class: error, "
      "exit_code: 3, ranks: [1]}\ntimeouts: {run_s: 60}\n");
  ASSERT_EQ(r.proc.exit_code, 0) << r.proc.output;
  const auto history = read_history(r.dir + "/history.jsonl");
  std::string run_id, port;
  for (const auto& e : history) {
    if (e.kind == "run_start") run_id = nlohmann::json::parse(e.data_json)["run_id"];
  }
  EXPECT_EQ(run_id, "r");
  for (int rank = 0; rank < 2; ++rank) {
    const auto log = read(r.dir + "/ranks/rank" + std::to_string(rank) + "/output.log");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        log, m,
        std::regex(
            "contract RANK=" + std::to_string(rank) +
            " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
            " LOCAL_WORLD_SIZE=2 NODE_RANK=0 MASTER_ADDR=127\\.0\\.0\\.1 MASTER_PORT=([0-9]+) "
            "TORCHELASTIC_RUN_ID=r TORCHELASTIC_RESTART_COUNT=0 probe=1")))
        << log;
    if (port.empty()) port = m[1];
    EXPECT_EQ(m[1].str(), port);  // one master port for the job
    int steps = 0, hello = 0, sections = 0, colls = 0, errors = 0;
    for (const auto& e : history) {
      if (e.source != "rank" || e.rank != rank) continue;
      steps += e.kind == "step";
      hello += e.kind == "hello";
      sections += e.kind == "section";
      colls += e.kind == "collective";
      errors += e.kind == "error";
    }
    EXPECT_EQ(steps, 4) << "rank " << rank;
    EXPECT_EQ(hello, 1);
    EXPECT_EQ(sections, 10);  // setup and 4 steps, begin and end
    EXPECT_EQ(colls, 8);
    EXPECT_EQ(errors, 1);
  }
  EXPECT_EQ(nlohmann::json::parse(read(r.dir + "/verdict.json"))["rejected_events"], 0);
}

TEST(CommandWorkload, ASignalAtAStepReachesTheJob) {
  auto r = run_yaml(
      "name: killed\ntopology: {ranks: 2}\n"
      "workload: {kind: command, command: " +
      job(", \"120\", \"50\"") +
      "}\n"
      "faults:\n  - {signal: KILL, rank: 1, step: 3}\n"
      "expect: {symptom: \"4.8\", oracle: exit_class, exit_class: signal, "
      "ranks: [1]}\ntimeouts: {run_s: 60}\n");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
  int last_step = -1;
  for (const auto& e : read_history(r.dir + "/history.jsonl")) {
    if (e.source == "rank" && e.rank == 1 && e.kind == "step") last_step = e.step;
  }
  EXPECT_GE(last_step, 3);
  EXPECT_LT(last_step, 119);
}

TEST(CommandWorkload, ALogOracleJudgesAJobWithoutTheProbe) {
  auto r = run_yaml(
      "name: nolog\ntopology: {ranks: 2}\n"
      "workload: {kind: command, probe: false, command: [\"/bin/sh\", \"-c\", "
      "\"echo fatal: rank $RANK of $WORLD_SIZE lost its peer >&2; exit 4\"]}\n"
      "expect: {symptom: \"4.7\", oracle: error_signature, pattern: \"fatal: rank 1 of 2 lost\"}\n"
      "timeouts: {run_s: 60}\n");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;
}

// {fl_ckpt} is this build's fl-ckpt: an offline step (zero_to_fp32's conversion) runs as the job,
// and its failure is judged from its output.
TEST(CommandWorkload, TheFlCkptPlaceholderRunsThisBuildsCheckpointTool) {
  auto r = run_yaml(
      "name: tool\ntopology: {ranks: 1}\n"
      "workload: {kind: command, probe: false, command: [\"{fl_ckpt}\", \"inspect\", "
      "\"{run_dir}/no-checkpoint\"]}\n"
      "expect: {symptom: \"4.10\", oracle: error_signature, pattern: \"no-checkpoint\"}\n"
      "timeouts: {run_s: 60}\n");
  EXPECT_EQ(r.proc.exit_code, 0) << r.proc.output;  // fl-ckpt ran and named the folder
}

// Refused before the run exists (issue 32): `validate` says the same, and no run directory is
// left.
TEST(CommandWorkload, AMissingCommandIsRefusedBeforeTheRunNamingTheCommand) {
  auto r = run_yaml(
      "name: missing\ntopology: {ranks: 2}\n"
      "workload: {kind: command, command: [\"/nonexistent/train\", \"--x\"]}\n"
      "expect: {oracle: completed}\n");
  EXPECT_EQ(r.proc.exit_code, 2) << r.proc.output;
  EXPECT_NE(r.proc.output.find("s.yaml: workload.command[0]: '/nonexistent/train' is not an "
                               "executable file (PATH "),
            std::string::npos)
      << r.proc.output;
  EXPECT_NE(r.proc.output.find("; command: /nonexistent/train --x"), std::string::npos);
  EXPECT_FALSE(fs::exists(r.dir)) << "a run directory was left";
}

TEST(CommandWorkload, ACommandThatEndsBeforeReportingIsAHarnessError) {
  auto r = run_yaml(
      "name: atonce\ntopology: {ranks: 2}\n"
      "workload: {kind: command, command: [\"/bin/sh\", \"-c\", "
      "\"echo no such module; exit 1\"]}\n"
      "expect: {oracle: completed}\ntimeouts: {run_s: 60}\n");
  EXPECT_EQ(r.proc.exit_code, 2) << r.proc.output;
  EXPECT_TRUE(std::regex_search(
      r.proc.output, std::regex("rank [01]: workload.command exited with status 1 [0-9.]+ s after "
                                "launch before it reported anything")))
      << r.proc.output;
  EXPECT_NE(r.proc.output.find("command: /bin/sh -c echo no such module; exit 1"),
            std::string::npos);
  EXPECT_NE(r.proc.output.find("its last output: no such module"), std::string::npos);
}

TEST(CommandWorkload, ACommandThatNeverReportsIsAHarnessError) {
  auto r = run_yaml(
      "name: silent\ntopology: {ranks: 2}\n"
      "workload: {kind: command, report_timeout_s: 2, command: [\"/bin/sleep\", "
      "\"60\"]}\nexpect: {oracle: completed}\ntimeouts: {run_s: 60}\n");
  EXPECT_EQ(r.proc.exit_code, 2) << r.proc.output;
  EXPECT_NE(r.proc.output.find("ranks 0, 1: workload.command is running but reported nothing "
                               "through the probe within workload.report_timeout_s (2 s"),
            std::string::npos)
      << r.proc.output;
  EXPECT_NE(r.proc.output.find("command: /bin/sleep 60"), std::string::npos);
  // Ended by the harness once the report timeout passed: not by the 60 s run timeout, and not
  // left until the commands end by themselves (without timing the run, which load stretches).
  int ended_by_harness = 0;
  for (const auto& e : read_history(r.dir + "/history.jsonl")) {
    if (e.kind == "run_end") {
      EXPECT_EQ(nlohmann::json::parse(e.data_json).value("reason", ""), "all ranks ended");
    }
    if (e.kind == "rank_exit") {
      const auto d = nlohmann::json::parse(e.data_json);
      EXPECT_TRUE(d.value("by_harness", false)) << d;
      ended_by_harness += d.value("by_harness", false) ? 1 : 0;
    }
  }
  EXPECT_EQ(ended_by_harness, 2) << r.proc.output;
}

// A job that hangs where the scenario expects it to complete is ended by the run timeout with a
// verdict (fail, exit 1), not left running; before the teardown the harness records where each
// rank was: its threads (threads.txt) and, through the Python probe's SIGUSR1 handler, every
// thread's Python stack (stacks.txt).
TEST(CommandWorkload, AHungJobEndsAtTheRunTimeoutWithItsStacks) {
  auto r = run_yaml(
      "name: stuck\ntopology: {ranks: 2}\n"
      "workload: {kind: command, command: [\"/usr/bin/python3\", \"-c\", \"import "
      "faultline_probe as p, time\\ndef stuck_in_collective():\\n    while True:\\n        "
      "time.sleep(0.2)\\np.init()\\nstuck_in_collective()\\n\"]}\n"
      "expect: {oracle: completed}\ntimeouts: {run_s: 4}\n");
  EXPECT_EQ(r.proc.exit_code, 1) << r.proc.output;
  const auto history = read_history(r.dir + "/history.jsonl");
  nlohmann::json dump;
  std::string end;
  for (const auto& e : history) {
    if (e.kind == "stack_dump") dump = nlohmann::json::parse(e.data_json);
    if (e.kind == "run_end") end = nlohmann::json::parse(e.data_json).value("reason", "");
  }
  EXPECT_EQ(end, "run timeout (4 s)");
  ASSERT_FALSE(dump.is_null()) << r.proc.output;
  EXPECT_EQ(dump["reason"], "run timeout (4 s)");
  EXPECT_EQ(dump["dumped"], nlohmann::json::array({0, 1})) << dump;
  EXPECT_EQ(dump["threads"], nlohmann::json::array({0, 1})) << dump;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string rdir = r.dir + "/ranks/rank" + std::to_string(rank);
    const auto stacks = read(rdir + "/stacks.txt");
    EXPECT_NE(stacks.find("== run timeout (4 s)"), std::string::npos) << stacks;
    EXPECT_NE(stacks.find("in stuck_in_collective"), std::string::npos) << stacks;
    EXPECT_NE(stacks.find("in _heartbeats"), std::string::npos) << stacks;  // every thread
    EXPECT_NE(read(rdir + "/threads.txt").find(" state "), std::string::npos);
  }
}

TEST(CommandWorkload, BadCommandScenariosAreRefusedNamingTheKey) {
  const auto dir = test::fresh_test_dir("command", "validate");
  fs::create_directories(dir);
  auto check = [&](const std::string& yaml, const std::string& want) {
    std::ofstream(dir + "/s.yaml") << yaml;
    auto p = test::run_process({FAULTLINE_CLI, "validate", dir + "/s.yaml"});
    EXPECT_EQ(p.exit_code, 2) << yaml << p.output;
    EXPECT_NE(p.output.find(want), std::string::npos) << p.output;
  };
  check("name: a\nworkload: {kind: command}\n", "workload.command: workload.kind: command needs");
  check("name: a\nworkload: {command: [\"x\"]}\n",
        "a command is for workload.kind: command (this workload is train)");
  check("name: a\ntopology: {launcher: mpirun}\nworkload: {kind: command, command: [\"x\"]}\n",
        "topology.launcher: workload.kind: command starts its ranks itself");
  check("name: a\nworkload: {kind: command, command: [\"x\", \"{rnak}\"]}\n",
        "workload.command[1]: '{rnak}': unknown placeholder '{rnak}'");
  check(
      "name: a\nworkload: {kind: command, command: [\"x\"]}\nfaults:\n  - plan: "
      "\"optimizer.step[rank=1]=error\"\n",
      "in-process fault plans need faultline's own workers");
}

}  // namespace
}  // namespace fl::harness
