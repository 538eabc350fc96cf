// faultline suite --executor slurm without a cluster: fake `sbatch`, `scontrol`, `scancel` and
// `sacct` on PATH (shell scripts) answer as Slurm would. The preflight refuses, before anything is
// submitted, a missing sbatch, a controller that does not answer, an unknown partition, a
// partition too small for a scenario's topology and a bad --time-limit; a suite through the fake
// array gathers every task, and a task Slurm ended (TIMEOUT) or that never ran (CANCELLED) is an
// error naming its array task, its case and the state; --fail-fast cancels the array's pending
// tasks and skips their cases. The real single-node Slurm: slurm.suite
// (tests/harness/slurm_test.sh).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "harness/suite/executor.hpp"
#include "harness/suite/slurm_cluster.hpp"
#include "harness/suite/suite.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

// Polls every 100 ms instead of 2 s (read once, before the first suite).
const bool kFastPoll = ::setenv("FAULTLINE_SLURM_POLL_MS", "100", 1) == 0;

std::string test_dir() {
  return test::fresh_test_dir("suite_slurm",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

void write_exec(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_all);
}

// PATH for the test's lifetime.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& value) : old_(std::getenv("PATH")) {
    ::setenv("PATH", value.c_str(), 1);
  }
  ~ScopedPath() { ::setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

// A fake cluster in DIR/bin: partition `local` (default, 1 node of 2 CPUs, MaxTime 1:00:00) and
// `big` (2 nodes of 8 CPUs). FAKE_PING=down makes the controller not answer. sbatch runs every
// array task at once through the real array script and records its state; a scenario named
// never-* is cancelled before it runs, timeout-* starts and is killed at its time limit.
std::string fake_slurm(const std::string& dir, bool controller_up = true) {
  const std::string bin = dir + "/bin";
  fs::create_directories(bin + "/../jobs");
  write_exec(bin + "/scontrol",
             R"(#!/bin/bash
jobs=$(dirname "$0")/../jobs
case "$1 $2" in
  "ping ") )" +
                 std::string(controller_up ? "echo 'Slurmctld(primary) at fake is UP'"
                                           : "echo 'Slurmctld(primary) at fake is DOWN'; exit 1") +
                 R"( ;;
  "show partition")
    echo "PartitionName=local AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=01:00:00 Nodes=fake1 State=UP TotalCPUs=2 TotalNodes=1"
    echo "PartitionName=big AllowGroups=ALL Default=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED Nodes=fake[2-3] State=UP TotalCPUs=16 TotalNodes=2"
    echo "PartitionName=gone Default=NO Nodes=fake4 State=DOWN TotalCPUs=2 TotalNodes=1" ;;
  "show node")
    echo "NodeName=fake1 Arch=x86_64 CPUAlloc=0 CPUTot=2 Partitions=local State=IDLE"
    echo "NodeName=fake2 Arch=x86_64 CPUAlloc=0 CPUTot=8 Partitions=big State=IDLE"
    echo "NodeName=fake3 Arch=x86_64 CPUAlloc=0 CPUTot=8 Partitions=big State=IDLE" ;;
  "show config") echo "MaxArraySize            = 1001" ;;
  "show job")
    job=$4
    [[ -d $jobs/$job ]] || { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
    for f in "$jobs/$job"/state-*; do
      k=${f##*state-}
      read -r state code < "$f"
      echo "JobId=$((job + k + 1)) ArrayJobId=$job ArrayTaskId=$k JobName=x JobState=$state Reason=None Dependency=(null) ExitCode=$code RunTime=00:00:03 Command=/x/array.sh /a b NodeList=fake1"
    done ;;
  *) echo "fake scontrol: $*" >&2; exit 1 ;;
esac
)");
  write_exec(bin + "/sbatch", R"(#!/bin/bash
jobs=$(dirname "$0")/../jobs
echo "$@" >> "$jobs/sbatch.calls"
job=$((4242 + $(ls "$jobs" | grep -c '^[0-9]')))
mkdir -p "$jobs/$job"
for a in "$@"; do
  case $a in
    --array=*) range=${a#--array=}; range=${range%%%*}; last=${range#0-} ;;
    --chdir=*) chdir=${a#--chdir=} ;;
  esac
done
script=${@: -3:1} round=${@: -2:1} cwd=${@: -1:1}
for k in $(seq 0 "$last"); do
  file=$(tr '\0' '\n' < "$round/task-$k.argv" | sed -n 3p)
  results=$(tr '\0' '\n' < "$round/task-$k.argv" | sed -n 5p)
  id=$(tr '\0' '\n' < "$round/task-$k.argv" | sed -n 7p)
  case $(basename "$file") in
    never-*) echo "CANCELLED 0:0" > "$jobs/$job/state-$k" ;;
    pending-*) echo "PENDING 0:0" > "$jobs/$job/state-$k" ;;
    timeout-*) mkdir -p "$results/$id"; echo "slurmstepd: *** JOB CANCELLED DUE TO TIME LIMIT ***" > "$chdir/task-$k.out"
               echo "TIMEOUT 0:15" > "$jobs/$job/state-$k" ;;
    *) (cd "$chdir" && SLURM_ARRAY_TASK_ID=$k "$script" "$round" "$cwd" > "task-$k.out" 2>&1)
       rc=$?
       if [[ $rc -eq 0 ]]; then echo "COMPLETED 0:0"; else echo "FAILED $rc:0"; fi > "$jobs/$job/state-$k" ;;
  esac
done
echo "$job"
)");
  write_exec(bin + "/scancel", R"(#!/bin/bash
jobs=$(dirname "$0")/../jobs
echo "$@" >> "$jobs/scancel.calls"
if [[ $1 == --state=PENDING ]]; then
  for f in "$jobs/$2"/state-*; do grep -q PENDING "$f" && echo "CANCELLED 0:0" > "$f"; done
fi
true
)");
  write_exec(bin + "/sacct", "#!/bin/bash\nexit 1\n");
  return bin;
}

// `faultline run FILE --results DIR --run-id ID --set seed=N [--fix]` as a shell script: fail-*
// fails, anything else passes.
std::string fake_faultline(const std::string& dir) {
  const std::string path = dir + "/fake-faultline";
  write_exec(path, R"(#!/bin/bash
file=$2 results=$4 id=$6
name=$(basename "$file" .yaml)
mkdir -p "$results/$id"
outcome=pass
case $name in fail-*) outcome=fail ;; esac
echo "fake run $id: $outcome"
printf '{"outcome": "%s", "explanation": "fake %s", "manifested_s": 1.5}\n' "$outcome" "$id" \
  > "$results/$id/verdict.json"
[[ $outcome == pass ]]
)");
  return path;
}

void write_scenario(const std::string& dir, const std::string& name, const std::string& topology) {
  fs::create_directories(dir);
  std::ofstream(dir + "/" + name + ".yaml")
      << "name: " << name << "\ntopology: " << topology << "\nworkload: {steps: 1}\n"
      << "expect: {oracle: completed}\n";
}

SuiteOptions slurm_options(const std::string& dir) {
  SuiteOptions o;
  o.progress = false;
  o.calibrate_every = 0;
  o.executor = "slurm";
  o.results_dir = dir + "/out";
  o.faultline_bin = fake_faultline(dir);
  return o;
}

// Runs the suite expecting a UsageError; returns its text. Nothing may have been submitted.
std::string refusal(const std::string& dir, const SuiteOptions& o) {
  try {
    run_suite(dir + "/s", o);
  } catch (const UsageError& e) {
    EXPECT_FALSE(fs::exists(dir + "/jobs/sbatch.calls")) << "submitted despite: " << e.what();
    EXPECT_FALSE(fs::exists(o.results_dir)) << "a suite directory for a refused suite";
    return e.what();
  }
  ADD_FAILURE() << "the suite was not refused";
  return "";
}

TEST(SuiteSlurmInput, NoSlurmOnPathIsRefusedBeforeAnything) {
  const auto dir = test_dir();
  write_scenario(dir + "/s", "a", "{ranks: 1}");
  fs::create_directories(dir + "/empty");
  ScopedPath path(dir + "/empty");
  const std::string e = refusal(dir, slurm_options(dir));
  EXPECT_NE(e.find("--executor slurm: no sbatch on PATH"), std::string::npos) << e;
  EXPECT_NE(e.find("nothing was submitted"), std::string::npos) << e;
}

TEST(SuiteSlurmInput, AControllerThatDoesNotAnswerIsRefused) {
  const auto dir = test_dir();
  write_scenario(dir + "/s", "a", "{ranks: 1}");
  ScopedPath path(fake_slurm(dir, false) + ":/usr/bin:/bin");
  const std::string e = refusal(dir, slurm_options(dir));
  EXPECT_NE(e.find("the Slurm controller does not answer (scontrol ping, exit status 1: "
                   "Slurmctld(primary) at fake is DOWN)"),
            std::string::npos)
      << e;
}

TEST(SuiteSlurmInput, UnknownOrDownPartitionsAreRefused) {
  const auto dir = test_dir();
  write_scenario(dir + "/s", "a", "{ranks: 1}");
  ScopedPath path(fake_slurm(dir) + ":/usr/bin:/bin");
  SuiteOptions o = slurm_options(dir);
  o.slurm.partition = "nope";
  std::string e = refusal(dir, o);
  EXPECT_NE(e.find("--partition 'nope': no such partition (partitions: local, big, gone)"),
            std::string::npos)
      << e;
  o.slurm.partition = "gone";
  e = refusal(dir, o);
  EXPECT_NE(e.find("partition 'gone' is DOWN"), std::string::npos) << e;
}

TEST(SuiteSlurmInput, APartitionSmallerThanATopologyIsRefused) {
  const auto dir = test_dir();
  write_scenario(dir + "/s", "four", "{ranks: 4, dp: 4}");
  ScopedPath path(fake_slurm(dir) + ":/usr/bin:/bin");
  SuiteOptions o = slurm_options(dir);
  std::string e = refusal(dir, o);
  EXPECT_NE(e.find("scenario 'four' (" + dir +
                   "/s/four.yaml: topology.ranks 4 on 1 node) needs 4 "
                   "CPUs on a node (one a rank), but the largest node of partition 'local' has 2"),
            std::string::npos)
      << e;
  // --set reaches the check as it reaches the runs.
  o.run_args = {"--set", "topology.ranks=2", "--set", "topology.dp=2"};
  auto ex = make_slurm_executor();
  EXPECT_NO_THROW(ex->check(plan_suite(dir + "/s", o).cases, o));
  o.run_args.clear();
  o.slurm.overcommit = true;  // ranks may share the node's CPUs
  EXPECT_NO_THROW(ex->check(plan_suite(dir + "/s", o).cases, o));
  // Three hosts: three nodes, which no partition has.
  fs::remove_all(dir + "/s");
  write_scenario(dir + "/s", "spread",
                 "{ranks: 3, launcher: mpirun, hosts: [n1=10.0.0.1, n2=10.0.0.2, n3=10.0.0.3]}");
  o.slurm.partition = "big";
  e = refusal(dir, o);
  EXPECT_NE(e.find("topology.ranks 3 on 3 nodes) needs 3 nodes, but partition 'big' has 2"),
            std::string::npos)
      << e;
}

TEST(SuiteSlurmInput, BadOrTooLongTimeLimitsAreRefused) {
  const auto dir = test_dir();
  write_scenario(dir + "/s", "a", "{ranks: 1}");
  ScopedPath path(fake_slurm(dir) + ":/usr/bin:/bin");
  SuiteOptions o = slurm_options(dir);
  o.slurm.time_limit = "ten";
  EXPECT_NE(refusal(dir, o).find("--time-limit 'ten': not a Slurm time"), std::string::npos);
  o.slurm.time_limit = "2:00:00";
  EXPECT_NE(refusal(dir, o).find("--time-limit 2:00:00: partition 'local' allows at most "
                                 "01:00:00 (MaxTime)"),
            std::string::npos);
}

TEST(SuiteSlurmParse, TimesIndexSetsAndRecords) {
  EXPECT_EQ(slurm::parse_duration("5"), 300);
  EXPECT_EQ(slurm::parse_duration("5:30"), 330);
  EXPECT_EQ(slurm::parse_duration("1:02:03"), 3723);
  EXPECT_EQ(slurm::parse_duration("2-1"), 2 * 86400 + 3600);
  EXPECT_EQ(slurm::parse_duration("1-00:00:10"), 86410);
  EXPECT_EQ(slurm::parse_duration("UNLIMITED"), -1);
  EXPECT_EQ(slurm::parse_duration("1h"), std::nullopt);
  EXPECT_EQ(slurm::parse_index_set("3"), (std::vector<int>{3}));
  EXPECT_EQ(slurm::parse_index_set("0,2-4%2"), (std::vector<int>{0, 2, 3, 4}));
  EXPECT_THROW(slurm::parse_index_set("a-b"), Error);
  const auto r = slurm::parse_records(
      "JobId=7 ArrayTaskId=1 JobState=FAILED Command=/x/array.sh /r /c ExitCode=2:0\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].at("Command"), "/x/array.sh /r /c");
  EXPECT_EQ(r[0].at("ExitCode"), "2:0");
  EXPECT_TRUE(WIFEXITED(slurm::wait_status("2:0")));
  EXPECT_EQ(WEXITSTATUS(slurm::wait_status("2:0")), 2);
  EXPECT_TRUE(WIFSIGNALED(slurm::wait_status("0:9")));
  EXPECT_EQ(WTERMSIG(slurm::wait_status("0:9")), 9);
}

// The controller forgot the job (MinJobAge): the states come from sacct's parsable lines. The
// fake prints what a real slurmdbd 22.05 printed for an array of 4 run one at a time (%1), whose
// task 1 was cancelled while it ran and whose tasks 2-3 were cancelled pending: the combined
// record keeps its first range, [0-3%1], after tasks 0 and 1 ran (slurm.sacct runs the real one).
TEST(SuiteSlurmParse, SacctAnswersOnceTheControllerForgotTheJob) {
  const auto dir = test_dir();
  const std::string bin = dir + "/bin";
  fs::create_directories(bin);
  write_exec(bin + "/scontrol",
             "#!/bin/bash\necho 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n");
  write_exec(bin + "/sacct", R"(#!/bin/bash
[[ "$*" == "-n -P -X -j 4242 -o JobID,State,ExitCode,ElapsedRaw,NodeList" ]] || exit 1
echo "4242_0|COMPLETED|0:0|12|n1"
echo "4242_1|CANCELLED by 0|0:0|3|n2"
echo "4242_[0-3%1]|CANCELLED by 0|0:0|0|None assigned"
echo "4243_0|FAILED|1:0|1|n1"
)");
  ScopedPath path(bin + ":/usr/bin:/bin");
  const auto q = slurm::query_array("4242");
  ASSERT_TRUE(q.has_value());
  ASSERT_EQ(q->size(), 4u);
  EXPECT_EQ(q->at(0).state, "COMPLETED") << "the task's own line, not the stale range";
  EXPECT_EQ(q->at(0).node, "n1");
  EXPECT_EQ(q->at(0).run_s, 12);
  EXPECT_EQ(q->at(1).state, "CANCELLED");
  EXPECT_EQ(q->at(1).exit_code, "0:0");
  EXPECT_EQ(q->at(1).node, "n2");
  EXPECT_EQ(q->at(3).state, "CANCELLED");
  EXPECT_EQ(q->at(3).node, "") << "None assigned: it never ran";
  // Neither knows the job: nothing, so the executor counts it as not listed.
  EXPECT_FALSE(slurm::query_array("999").has_value());
}

// Lines as a real sacct prints them, in both orders the database returned them in: a task's own
// line wins over the combined record's range; FAILED by a signal keeps its "0:9".
TEST(SuiteSlurmParse, SacctTaskLinesWinOverTheArraysStaleRangeInEitherOrder) {
  const std::string range = "7_[0-3%1]|PENDING|0:0|0|None assigned\n";
  const std::string tasks =
      "7_0|COMPLETED|0:0|2|vm\n7_1|FAILED|0:9|1|vm\n7_2|OUT_OF_MEMORY|0:125|4|vm\n";
  for (const auto& text : {range + tasks, tasks + range}) {
    const auto q = slurm::parse_sacct("7", text);
    ASSERT_EQ(q.size(), 4u) << text;
    EXPECT_EQ(q.at(0).state, "COMPLETED") << text;
    EXPECT_EQ(q.at(1).state, "FAILED") << text;
    EXPECT_TRUE(WIFSIGNALED(slurm::wait_status(q.at(1).exit_code)));
    EXPECT_EQ(WTERMSIG(slurm::wait_status(q.at(1).exit_code)), 9);
    EXPECT_EQ(q.at(2).state, "OUT_OF_MEMORY") << text;
    EXPECT_TRUE(slurm::is_terminal(q.at(2).state));
    EXPECT_EQ(q.at(3).state, "PENDING") << text;
    EXPECT_FALSE(slurm::is_terminal(q.at(3).state));
  }
  // Another job whose id starts the same, a job step, a cut state column ("CANCELLED+", as
  // sacct prints without -P), short and malformed lines: only 7_5 counts.
  const auto q = slurm::parse_sacct(
      "7",
      "77_1|COMPLETED|0:0|1|vm\n7_4.batch|COMPLETED|0:0|1|vm\n7_5|CANCELLED+|0:15|1|vm\n"
      "7_6|COMPLETED\n7_x|COMPLETED|0:0|1|vm\n7_[1-|PENDING|0:0|0|None assigned\n\n");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q.at(5).state, "CANCELLED");
  EXPECT_TRUE(slurm::parse_sacct("7", "").empty());
}

TEST(SuiteSlurmRun, EveryTaskIsGatheredAndSlurmsKillsAreErrorsNamingTheTask) {
  const auto dir = test_dir();
  for (const char* n : {"pass-a", "fail-b", "timeout-c", "never-d"}) {
    write_scenario(dir + "/s", n, "{ranks: 1}");
  }
  ScopedPath path(fake_slurm(dir) + ":/usr/bin:/bin");
  SuiteOptions o = slurm_options(dir);
  o.retries = 1;
  o.slurm.time_limit = "10";
  const SuiteResult r = run_suite(dir + "/s", o);
  std::map<std::string, const SuiteCase*> by;
  for (const auto& c : r.cases) by[c.name] = &c;
  ASSERT_EQ(by.size(), 4u);
  EXPECT_EQ(by["pass-a"]->outcome, "pass");
  EXPECT_EQ(by["pass-a"]->attempts.at(0).job, "4242_2 COMPLETED");  // cases in file order
  EXPECT_TRUE(fs::exists(r.dir + "/runs/pass-a-s7/verdict.json"));
  EXPECT_TRUE(fs::exists(r.dir + "/runs/pass-a-s7.log")) << "the task's output moves beside it";
  // A failed expectation is retried in a second array of its own.
  EXPECT_EQ(by["fail-b"]->outcome, "fail");
  ASSERT_EQ(by["fail-b"]->attempts.size(), 2u);
  EXPECT_EQ(by["fail-b"]->attempts[1].job, "4243_0 FAILED");
  EXPECT_EQ(by["fail-b"]->run_dir, r.dir + "/runs/fail-b-s7-try2");
  // Slurm's kills: errors, not retried, naming the task, the case and the state.
  EXPECT_EQ(by["timeout-c"]->outcome, "error");
  EXPECT_EQ(by["timeout-c"]->attempts.size(), 1u);
  EXPECT_NE(by["timeout-c"]->explanation.find(
                "Slurm array task 4242_3 (timeout-c seed 7) ended TIMEOUT on fake1; the run "
                "said: "),
            std::string::npos)
      << by["timeout-c"]->explanation;
  EXPECT_EQ(by["never-d"]->outcome, "error");
  EXPECT_EQ(by["never-d"]->explanation,
            "Slurm array task 4242_1 (never-d seed 7) ended CANCELLED on fake1; the run never "
            "started");
  // One sbatch per round, each one array with the request and the time limit.
  std::ifstream calls(dir + "/jobs/sbatch.calls");
  std::string first, second, extra;
  std::getline(calls, first);
  std::getline(calls, second);
  EXPECT_FALSE(std::getline(calls, extra)) << extra;
  EXPECT_NE(first.find("--array=0-3 --job-name=faultline-s --partition=local --nodes=1 "
                       "--ntasks-per-node=1 --time=10"),
            std::string::npos)
      << first;
  EXPECT_NE(second.find("--array=0-0 "), std::string::npos) << second;
  const auto j = nlohmann::json::parse(std::ifstream(r.dir + "/summary.json"));
  EXPECT_EQ(j["selection"]["executor"], "slurm");
  EXPECT_EQ(j["slurm"]["jobs"].size(), 2u);
  EXPECT_EQ(j["counts"]["pass"], 1);
  EXPECT_EQ(j["counts"]["error"], 2);
  EXPECT_EQ(j["cases"][0]["attempts"][0]["slurm_task"], "4242_0 FAILED");
  EXPECT_EQ(j["cases"][0]["attempts"][1]["slurm_task"], "4243_0 FAILED");
  EXPECT_EQ(r.exit_code(), 1);
}

// --longest-first orders the array's tasks as it orders local launches.
TEST(SuiteSlurmRun, LongestFirstOrdersTheArraysTasks) {
  const auto dir = test_dir();
  for (const char* n : {"pass-a", "pass-b"}) write_scenario(dir + "/s", n, "{ranks: 1}");
  const nlohmann::json ran = {{{"outcome", "pass"}}};
  std::ofstream(dir + "/earlier.json") << nlohmann::json{
      {"suite", "s"},
      {"cases",
       {{{"id", "pass-a-s7"}, {"outcome", "pass"}, {"attempts", ran}, {"wall_s", 1.0}},
        {{"id", "pass-b-s7"},
         {"outcome", "pass"},
         {"attempts", ran},
         {"wall_s", 9.0}}}}}.dump();
  ScopedPath path(fake_slurm(dir) + ":/usr/bin:/bin");
  SuiteOptions o = slurm_options(dir);
  o.longest_first = dir + "/earlier.json";
  const SuiteResult r = run_suite(dir + "/s", o);
  ASSERT_EQ(r.cases.size(), 2u);
  EXPECT_EQ(r.cases[0].name, "pass-a");  // the result in suite order
  EXPECT_EQ(r.cases[0].attempts.at(0).job, "4242_1 COMPLETED");
  EXPECT_EQ(r.cases[1].attempts.at(0).job, "4242_0 COMPLETED");
}

TEST(SuiteSlurmRun, OneArrayPerResourceShapeGatheredIntoOneSuite) {
  const auto dir = test_dir();
  write_scenario(dir + "/s", "pass-a", "{ranks: 1}");
  write_scenario(dir + "/s", "pass-b", "{ranks: 2, launcher: mpirun, hosts: [x, y]}");
  write_scenario(dir + "/s", "pass-c", "{ranks: 1}");
  write_scenario(dir + "/s", "pass-d", "{ranks: 4}");
  ScopedPath path(fake_slurm(dir) + ":/usr/bin:/bin");
  SuiteOptions o = slurm_options(dir);
  o.slurm.partition = "big";
  const SuiteResult r = run_suite(dir + "/s", o);
  std::map<std::string, const SuiteCase*> by;
  for (const auto& c : r.cases) by[c.name] = &c;
  ASSERT_EQ(by.size(), 4u);
  for (auto& [name, c] : by) EXPECT_EQ(c->outcome, "pass") << name << ": " << c->explanation;
  // Three shapes, three arrays in the order the shapes first appear (cases in file order).
  std::ifstream calls(dir + "/jobs/sbatch.calls");
  std::vector<std::string> lines;
  for (std::string l; std::getline(calls, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("--array=0-1 --job-name=faultline-s --partition=big --nodes=1 "
                          "--ntasks-per-node=1 "),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("--array=0-0 --job-name=faultline-s --partition=big --nodes=2 "
                          "--ntasks-per-node=1 "),
            std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("--array=0-0 --job-name=faultline-s --partition=big --nodes=1 "
                          "--ntasks-per-node=4 "),
            std::string::npos)
      << lines[2];
  EXPECT_EQ(by["pass-a"]->attempts.at(0).job, "4242_0 COMPLETED");
  EXPECT_EQ(by["pass-c"]->attempts.at(0).job, "4242_1 COMPLETED");
  EXPECT_EQ(by["pass-b"]->attempts.at(0).job, "4243_0 COMPLETED");
  EXPECT_EQ(by["pass-d"]->attempts.at(0).job, "4244_0 COMPLETED");
  // Every run and its task's output in the one suite directory; each group's argv files apart.
  for (const char* id : {"pass-a-s7", "pass-b-s7", "pass-c-s7", "pass-d-s7"}) {
    EXPECT_TRUE(fs::exists(r.dir + "/runs/" + id + "/verdict.json")) << id;
    EXPECT_TRUE(fs::exists(r.dir + "/runs/" + id + ".log")) << id;
  }
  EXPECT_TRUE(fs::exists(r.dir + "/slurm/round1/group2/task-0.argv"));
  const auto j = nlohmann::json::parse(std::ifstream(r.dir + "/summary.json"));
  ASSERT_EQ(j["slurm"]["jobs"].size(), 3u);
  EXPECT_EQ(j["slurm"]["jobs"][1]["nodes"], 2);
  EXPECT_EQ(j["slurm"]["jobs"][2]["tasks_per_node"], 4);
  EXPECT_EQ(j["slurm"]["nodes"], 2);  // the largest request
  EXPECT_EQ(j["slurm"]["tasks_per_node"], 4);
  EXPECT_EQ(j["counts"]["pass"], 4);
  EXPECT_EQ(r.exit_code(), 0);
}

TEST(SuiteSlurmRun, FailFastCancelsThePendingTasksAndSkipsTheirCases) {
  ASSERT_TRUE(kFastPoll);
  const auto dir = test_dir();
  for (const char* n : {"fail-a", "pending-b", "pending-c"})
    write_scenario(dir + "/s", n, "{ranks: 1}");
  ScopedPath path(fake_slurm(dir) + ":/usr/bin:/bin");
  SuiteOptions o = slurm_options(dir);
  o.fail_fast = true;
  const SuiteResult r = run_suite(dir + "/s", o);
  ASSERT_EQ(r.cases.size(), 3u);
  EXPECT_EQ(r.cases[0].outcome, "fail");
  for (int i : {1, 2}) {
    EXPECT_EQ(r.cases[i].outcome, "skipped") << r.cases[i].name;
    EXPECT_EQ(r.cases[i].explanation,
              "not started: --fail-fast stopped the suite after fail-a seed 7 failed");
    EXPECT_TRUE(r.cases[i].attempts.empty());
  }
  std::ifstream calls(dir + "/jobs/scancel.calls");
  std::string line;
  ASSERT_TRUE(std::getline(calls, line));
  EXPECT_EQ(line, "--state=PENDING 4242");
  EXPECT_EQ(r.exit_code(), 1);
}

TEST(SuiteSlurmInput, SlurmOptionsNeedTheSlurmExecutor) {
  const auto dir = test_dir();
  write_scenario(dir + "/s", "a", "{ranks: 1}");
  SuiteOptions o = slurm_options(dir);
  o.executor = "local";
  o.slurm.partition = "local";
  try {
    run_suite(dir + "/s", o);
    FAIL() << "ran";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("need --executor slurm"), std::string::npos);
  }
}

}  // namespace
}  // namespace fl::harness
