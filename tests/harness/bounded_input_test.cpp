// What crosses into the harness from outside its trust, held to limits (issue 32): JSON nested
// past 64 levels or longer than the limit, lines longer than the cap, files that are not regular.
// One line of 100000 '[' used to crash the root harness (a stack overflow re-serialising it) by
// four routes — a command job's probe line, a Connect batch, a history line, a rank's
// events.jsonl; each route has its regression here: the line is dropped and counted with the
// history's refused events, the next good line still gets in. A FIFO in place of a history or a
// probe file is refused at once, not waited on.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "base/event.hpp"
#include "base/file_read.hpp"
#include "base/json_bounded.hpp"
#include "harness/control/controller.hpp"
#include "harness/history/history.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "harness/run/runner.hpp"
#include "tests/support/process.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

std::string test_dir() {
  const auto d = test::fresh_test_dir(
      "bounded", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(d);
  return d;
}

std::string nested(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// A rank line whose data holds a value nested `depth` levels below the data object.
std::string deep_rank_line(size_t depth, uint64_t seq) {
  return R"({"rank":0,"seq":)" + std::to_string(seq) +
         R"(,"time_unix_ns":1,"kind":"step","step":0,"data":{"x":)" + nested(depth) + "}}";
}

std::string step_line(uint64_t seq) {
  return R"({"rank":0,"seq":)" + std::to_string(seq) +
         R"(,"time_unix_ns":2,"kind":"step","step":1,"data":{"loss":0.5}})";
}

constexpr size_t kDeep = 100000;

TEST(JsonBounded, SixtyFourLevelsParseAndTheSixtyFifthIsRefusedAsTooDeep) {
  EXPECT_EQ(parse_json_bounded(nested(64)).dump(), nested(64));
  try {
    parse_json_bounded(nested(65));
    FAIL() << "65 levels were accepted";
  } catch (const JsonRefused& e) {
    EXPECT_EQ(e.fault(), JsonFault::kTooDeep);
    EXPECT_STREQ(e.what(), "JSON nested deeper than 64 levels");
  }
  // Objects count as arrays do; brackets inside strings are text.
  EXPECT_NO_THROW(parse_json_bounded(R"({"a":{"b":"[[[[{{{{"}})", JsonLimits{2, 100}));
  EXPECT_THROW(parse_json_bounded(R"({"a":{"b":{}}})", JsonLimits{2, 100}), JsonRefused);
  EXPECT_EQ(parse_json_bounded("7", JsonLimits{0, 10}), 7);
}

TEST(JsonBounded, AHundredThousandLevelsAreRefusedWithoutBuildingThem) {
  std::string why;
  EXPECT_FALSE(try_parse_json_bounded(nested(kDeep), &why));
  EXPECT_EQ(why, "JSON nested deeper than 64 levels");
  std::string objects;
  for (size_t i = 0; i < kDeep; ++i) objects += "{\"a\":";
  EXPECT_FALSE(try_parse_json_bounded(objects, &why));
  EXPECT_EQ(why, "JSON nested deeper than 64 levels");
}

TEST(JsonBounded, TextOverTheSizeLimitAndTextThatIsNotJsonAreRefusedSayingWhy) {
  try {
    parse_json_bounded(R"({"a":"0123456789"})", JsonLimits{64, 10});
    FAIL();
  } catch (const JsonRefused& e) {
    EXPECT_EQ(e.fault(), JsonFault::kTooBig);
    EXPECT_STREQ(e.what(), "18 bytes of JSON (allowed: up to 10)");
  }
  for (const std::string bad : {"", "{", "{\"a\":1}x", "[1,]", "nul", "\"\xff\""}) {
    try {
      parse_json_bounded(bad);
      FAIL() << bad;
    } catch (const JsonRefused& e) {
      EXPECT_EQ(e.fault(), JsonFault::kMalformed) << bad;
      EXPECT_NE(std::string(e.what()).find("parse error"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_json_bounded(" {\"a\":[1,2.5,null,true]} \n")["a"][1], 2.5);
}

TEST(JsonBounded, AnEventLineNestedTooDeepIsRefusedByTheLineParser) {
  EXPECT_THROW(parse_json_line(deep_rank_line(kDeep, 1), EventLine::kRank), JsonRefused);
  // 62 levels under data (itself at 2) is the deepest a line may go.
  EXPECT_NO_THROW(parse_json_line(deep_rank_line(62, 1), EventLine::kRank));
  EXPECT_THROW(parse_json_line(deep_rank_line(63, 1), EventLine::kRank), JsonRefused);
}

TEST(LineReader, LinesOverTheCapAreReportedOnceAndSkippedToTheirNewline) {
  const auto dir = test_dir();
  const std::string file = dir + "/lines";
  // A line of 200000 bytes crosses several reads; the reader never holds it whole.
  std::ofstream(file) << "one\n" << std::string(200000, 'x') << "\ntwo\n\nthree";
  std::string why;
  const FileFd f = open_regular_file(file, &why);
  ASSERT_TRUE(f) << why;
  LineReader in(1000);
  std::string line;
  ASSERT_EQ(in.next(f.get(), &line), LineReader::Got::kLine);
  EXPECT_EQ(line, "one");
  EXPECT_EQ(in.next(f.get(), &line), LineReader::Got::kTooLong);
  EXPECT_EQ(in.line_number(), 2u);
  ASSERT_EQ(in.next(f.get(), &line), LineReader::Got::kLine);
  EXPECT_EQ(line, "two");
  EXPECT_EQ(in.line_number(), 3u);
  ASSERT_EQ(in.next(f.get(), &line), LineReader::Got::kLine);
  EXPECT_EQ(line, "");
  // "three" has no newline yet: left for later, the offset stays before it.
  EXPECT_EQ(in.next(f.get(), &line), LineReader::Got::kEnd);
  EXPECT_EQ(in.pending(), 5u);
  EXPECT_EQ(in.offset(), 4u + 200001u + 4u + 1u);
  std::ofstream(file, std::ios::app) << " and four\n";
  ASSERT_EQ(in.next(f.get(), &line), LineReader::Got::kLine);
  EXPECT_EQ(line, "three and four");
  EXPECT_EQ(in.next(f.get(), &line), LineReader::Got::kEnd);
  EXPECT_EQ(in.pending(), 0u);
  fs::remove_all(dir);
}

TEST(LineReader, AnOverlongLineStillBeingWrittenIsSkippedAcrossReads) {
  const auto dir = test_dir();
  const std::string file = dir + "/lines";
  std::ofstream(file) << std::string(5000, 'y');  // no newline yet
  const FileFd f = open_regular_file(file, nullptr);
  LineReader in(1000);
  std::string line;
  EXPECT_EQ(in.next(f.get(), &line), LineReader::Got::kTooLong);
  EXPECT_EQ(in.next(f.get(), &line), LineReader::Got::kEnd);
  std::ofstream(file, std::ios::app) << std::string(5000, 'y') << "\nok\n";
  ASSERT_EQ(in.next(f.get(), &line), LineReader::Got::kLine);  // the rest of it never returned
  EXPECT_EQ(line, "ok");
  EXPECT_EQ(in.line_number(), 2u);
  fs::remove_all(dir);
}

// Runs `f` in a child process so that a call that blocks (the open of a FIFO before this fix)
// fails the test after a deadline instead of hanging it. Returns the child's exit status.
template <class F>
int in_child_with_deadline(F&& f) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(f());
  for (int i = 0; i < 200; ++i) {  // 10 s
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    ::usleep(50000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;  // hung
}

TEST(RegularFile, AFifoIsRefusedAtOnceNamingItsType) {
  const auto dir = test_dir();
  ASSERT_EQ(::mkfifo((dir + "/history.jsonl").c_str(), 0600), 0);
  fs::create_directories(dir + "/sub");
  const int rc = in_child_with_deadline([&] {
    std::string why;
    if (open_regular_file(dir + "/history.jsonl", &why) || errno != EINVAL) return 1;
    if (why != "not a regular file (a FIFO)") return 2;
    if (open_regular_file(dir + "/sub", &why) || why != "not a regular file (a directory)")
      return 3;
    if (open_regular_file(dir + "/none", &why) || errno != ENOENT) return 4;
    try {
      read_history(dir + "/history.jsonl");
      return 5;
    } catch (const Error& e) {
      if (std::string(e.what()) != dir + "/history.jsonl: not a regular file (a FIFO)") return 6;
    }
    return 0;
  });
  EXPECT_EQ(rc, 0) << "(-1: it hung on the FIFO)";
  fs::remove_all(dir);
}

TEST(BoundedRoutes, AProbeLineNestedPastAnyStackOrLongerThanTheCapIsDroppedAndCounted) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/ranks/rank0");
  History h(dir + "/history.jsonl");
  h.harness("run_start", {{"ranks", 1}});
  ProbeIngest ingest(dir, 1);
  {
    std::ofstream out(probe_file(dir, 0));
    out << deep_rank_line(kDeep, 0) << "\n"
        << R"({"seq":1,"kind":"log","data":{"message":")" << std::string(kMaxEventLineBytes, 'z')
        << "\"}}\n"
        << step_line(2) << "\n";
  }
  EXPECT_EQ(ingest.poll(h), 1u);
  EXPECT_EQ(ingest.unparsable(), 2u);
  EXPECT_EQ(h.rejected(), 2u);
  const auto why = h.rejected_reasons();
  ASSERT_EQ(why.size(), 2u);
  EXPECT_EQ(why[0], "ranks/rank0/probe.jsonl:1: JSON nested deeper than 64 levels");
  EXPECT_EQ(why[1], "ranks/rank0/probe.jsonl:2: a line longer than 1114112 bytes");
  int steps = 0;
  for (const auto& e : h.events()) steps += e.kind == "step";
  EXPECT_EQ(steps, 1);
  fs::remove_all(dir);
}

TEST(BoundedRoutes, AFifoInPlaceOfAProbeFileIsCountedOnceAndNotWaitedOn) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/ranks/rank0");
  ASSERT_EQ(::mkfifo(probe_file(dir, 0).c_str(), 0600), 0);
  const int rc = in_child_with_deadline([&] {
    History h(dir + "/history.jsonl");
    h.harness("run_start", {{"ranks", 1}});
    ProbeIngest ingest(dir, 1);
    ingest.poll(h);
    ingest.poll(h);
    if (h.rejected() != 1) return 1;
    return h.rejected_reasons()[0] == "ranks/rank0/probe.jsonl: not a regular file (a FIFO)" ? 0
                                                                                             : 2;
  });
  EXPECT_EQ(rc, 0) << "(-1: it hung on the FIFO)";
  fs::remove_all(dir);
}

TEST(BoundedRoutes, AHistoryLineNestedPastAnyStackIsCountedAsRejected) {
  const auto dir = test_dir();
  {
    std::ofstream out(dir + "/history.jsonl");
    out << R"({"i":0,"t_ns":0,"source":"harness","rank":-1,"seq":0,"time_unix_ns":1,)"
        << R"("kind":"run_start","step":-1,"data":{"ranks":1}})"
        << "\n"
        << R"({"i":1,"t_ns":1,"source":"rank","rank":0,"seq":0,"time_unix_ns":1,)"
        << R"("kind":"step","step":0,"data":{"x":)" << nested(kDeep) << "}}\n"
        << R"({"i":2,"t_ns":2,"source":"rank","rank":0,"seq":1,"time_unix_ns":1,)"
        << R"("kind":"step","step":1,"data":{"y":)" << std::string(kMaxEventLineBytes, '1')
        << "}}\n"
        << R"({"i":3,"t_ns":3,"source":"rank","rank":0,"seq":2,"time_unix_ns":1,)"
        << R"("kind":"step","step":2,"data":{"loss":1.0}})"
        << "\n";
  }
  std::ofstream(dir + "/scenario.yaml")
      << "name: deep\ntopology: {ranks: 1}\nexpect: {oracle: completed}\n";
  size_t rejected = 0;
  const auto events = read_history(dir + "/history.jsonl", &rejected);
  EXPECT_EQ(rejected, 2u);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step, 2);
  // `verdict` judges it (the rank files route too, below); it does not crash.
  EXPECT_NO_THROW(judge_run_dir(dir));
  fs::remove_all(dir);
}

TEST(BoundedRoutes, ARanksEventsFileLineNestedPastAnyStackIsSkippedWhenJudgedAgain) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/ranks/rank0");
  std::ofstream(dir + "/history.jsonl")
      << R"({"i":0,"t_ns":0,"source":"harness","rank":-1,"seq":0,"time_unix_ns":1,)"
      << R"("kind":"run_start","step":-1,"data":{"ranks":1}})"
      << "\n";
  std::ofstream(dir + "/ranks/rank0/events.jsonl") << deep_rank_line(kDeep, 0) << "\n"
                                                   << step_line(1) << "\n";
  ASSERT_EQ(::mkfifo((dir + "/ranks/rank0/probe.jsonl").c_str(), 0600), 0);
  const int rc = in_child_with_deadline([&] {
    const auto got = history_with_rank_files(dir);
    return got.recovered == 1 && got.events.back().seq == 1 ? 0 : 1;
  });
  EXPECT_EQ(rc, 0) << "(-1: it hung on the FIFO)";
  fs::remove_all(dir);
}

// A real Connect stream with the run's secret: the batch's event data is JSON text that the
// history parses; one nested past any stack is refused and counted, the stream goes on.
TEST(BoundedRoutes, AConnectBatchWithDataNestedPastAnyStackIsRefusedAndCounted) {
  const auto dir = test_dir();
  History h(dir + "/history.jsonl");
  const auto no_actions = [](const ControlAction&) { return ControlResult{false, "", {}}; };
  Controller c(h, no_actions, "s3cret");
  const std::string addr = c.start("unix:" + dir + "/control.sock");
  h.harness("run_start", {{"ranks", 1}});
  auto stub =
      pb::Controller::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata(kControlSecretHeader, "s3cret");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Connect(&ctx);
  pb::EventBatch batch;
  for (int i = 0; i < 3; ++i) {
    auto* e = batch.add_events();
    e->set_rank(0);
    e->set_seq(static_cast<uint64_t>(i));
    e->set_kind("step");
    e->set_step(i);
    e->set_data_json(i == 1 ? "{\"x\":" + nested(kDeep) + "}" : R"({"loss":1.5})");
  }
  ASSERT_TRUE(stream->Write(batch));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  c.shutdown();
  EXPECT_EQ(c.events_ingested(), 3u);
  EXPECT_EQ(h.rejected(), 1u);
  ASSERT_EQ(h.rejected_reasons().size(), 1u);
  EXPECT_EQ(h.rejected_reasons()[0], "step: data nested deeper than 64 levels (allowed: up to 64)");
  int steps = 0;
  for (const auto& e : h.events()) steps += e.kind == "step";
  EXPECT_EQ(steps, 2);
  fs::remove_all(dir);
}

// The commands that read a run's history, on a FIFO in its place and on an empty history.
TEST(BoundedCommands, VerdictReportAndTraceRefuseAFifoHistoryAndReportSaysAnEmptyOneIsEmpty) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/run");
  std::ofstream(dir + "/run/scenario.yaml")
      << "name: fifo\ntopology: {ranks: 1}\nexpect: {oracle: completed}\n";
  ASSERT_EQ(::mkfifo((dir + "/run/history.jsonl").c_str(), 0600), 0);
  for (const char* cmd : {"verdict", "report", "trace"}) {
    const auto r =
        test::run_process({FAULTLINE_CLI, cmd, dir + "/run"}, {}, std::chrono::seconds(30));
    EXPECT_FALSE(r.timed_out) << cmd << " hung on the FIFO";
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(dir + "/run/history.jsonl: not a regular file (a FIFO)"),
              std::string::npos)
        << cmd << "\n"
        << r.output;
  }
  fs::remove(dir + "/run/history.jsonl");
  std::ofstream(dir + "/run/history.jsonl").close();
  const auto r =
      test::run_process({FAULTLINE_CLI, "report", dir + "/run"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("faultline: error: " + dir +
                          "/run/history.jsonl holds no events (a run that never started, or a "
                          "history emptied since): nothing to report"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("value()"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::harness
