// torchrun's conventions on the runner's side (harness/run/torchelastic.hpp): the error files
// torchelastic's @record writes, torchrun's "closing signal" lines, and the first failure named
// from a history as the runner writes it. The real torchrun runs are in torchrun_test.sh.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "harness/run/torchelastic.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness {
namespace {

// Written by torch 1.13's ErrorHandler.record_exception (json.dump of this shape).
const char* kRecorded =
    R"({"message": {"message": "IndexError: index out of range in self", "extraInfo": )"
    R"({"py_callstack": "Traceback (most recent call last):\n  File \"ddp_train.py\", line 142, )"
    R"(in train\nIndexError: index out of range in self\n", "timestamp": "1795941026"}}})";

TEST(WorkerErrorFile, RecordsJsonGivesTheExceptionItsMessageAndTimestamp) {
  std::string why;
  const auto w = parse_worker_error(nlohmann::json::parse(kRecorded), &why);
  ASSERT_TRUE(w) << why;
  EXPECT_EQ(w->message, "IndexError: index out of range in self");
  EXPECT_EQ(w->exception, "IndexError");
  EXPECT_EQ(w->timestamp, 1795941026);
  EXPECT_EQ(w->error_code, 0);
  EXPECT_EQ(w->callstack,
            "Traceback (most recent call last):\n  File \"ddp_train.py\", line 142, in train\n"
            "IndexError: index out of range in self\n");
}

TEST(WorkerErrorFile, TheNewerFormatAndTorchrunsErrorCodeAreRead) {
  std::string why;
  auto w = parse_worker_error(
      nlohmann::json::parse(R"({"message": "ValueError: bad", "timestamp": 17})"), &why);
  ASSERT_TRUE(w) << why;
  EXPECT_EQ(w->message, "ValueError: bad");
  EXPECT_EQ(w->timestamp, 17);
  auto j = nlohmann::json::parse(kRecorded);
  j["message"]["errorCode"] = 1;  // torchrun's copy of a child's file into its own
  w = parse_worker_error(j, &why);
  ASSERT_TRUE(w) << why;
  EXPECT_EQ(w->error_code, 1);
}

TEST(WorkerErrorFile, AnythingElseIsRefusedWithTheReason) {
  auto why_of = [](const char* text) {
    std::string why;
    EXPECT_FALSE(parse_worker_error(nlohmann::json::parse(text), &why)) << text;
    return why;
  };
  EXPECT_EQ(why_of(R"({"msg": "x"})"), "no 'message' (not torchelastic's)");
  EXPECT_EQ(why_of(R"([1, 2])"), "no 'message' (not torchelastic's)");
  EXPECT_EQ(why_of(R"({"message": 3})"), "'message' is neither a string nor an object");
  EXPECT_EQ(why_of(R"({"message": {"message": []}})"), "message.message is not a string");
  EXPECT_EQ(why_of(R"({"message": {"message": "E: x", "extraInfo": 5}})"),
            "message.extraInfo is not an object");
  EXPECT_EQ(why_of(R"({"message": {"message": "E: x", "extraInfo": {"timestamp": "-1"}}})"),
            "the timestamp is not a number of seconds");
}

class ErrorFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fl::test::removed_at_exit(
               fmt::format("{}/fl-torchelastic-{}", ::testing::TempDir(), ::getpid()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/run/ranks");
    std::filesystem::create_directories(dir_ + "/outside");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ErrorFiles, AFileTooBigOrAFifoIsRefusedNotRead) {
  const std::string big = dir_ + "/run/big.json";
  std::ofstream(big) << std::string(kErrorFileBytes + 1, ' ');
  std::string why;
  EXPECT_FALSE(read_worker_error(big, &why));
  EXPECT_NE(why.find(big), std::string::npos) << why;
  const std::string fifo = dir_ + "/run/fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(read_worker_error(fifo, &why));  // returns: a FIFO is not waited on
  EXPECT_EQ(why, fifo + ": not a regular file (a FIFO)");
  const std::string good = dir_ + "/run/error.json";
  std::ofstream(good) << kRecorded;
  EXPECT_TRUE(read_worker_error(good, &why)) << why;
}

TEST_F(ErrorFiles, OnlyPathsInsideTheRunDirectoryAreRead) {
  const std::string run = dir_ + "/run";
  EXPECT_TRUE(path_inside(run + "/ranks/error.json", run));
  EXPECT_TRUE(path_inside(run + "/ranks/../error.json", run));
  EXPECT_FALSE(path_inside(run + "/../outside/error.json", run));
  EXPECT_FALSE(path_inside("/etc/shadow", run));
  EXPECT_FALSE(path_inside("ranks/error.json", run));  // relative to what?
  // A directory link out of the run directory does not make a path inside it.
  std::filesystem::create_directory_symlink(dir_ + "/outside", run + "/ranks/link");
  EXPECT_FALSE(path_inside(run + "/ranks/link/error.json", run));
}

HistoryEvent event(uint64_t index, const std::string& source, int rank, const std::string& kind,
                   const std::string& data, int64_t unix_s) {
  HistoryEvent e;
  e.index = index;
  e.t_ns = static_cast<int64_t>(index) * 1'000'000;
  e.time_unix_ns = unix_s * 1'000'000'000 + static_cast<int64_t>(index) * 1'000'000;
  e.source = source;
  e.rank = rank;
  e.kind = kind;
  e.data_json = data;
  return e;
}

TEST(TorchrunClosed, TheAgentsClosingLinesNameThePidsAndSignals) {
  std::vector<HistoryEvent> h = {
      event(
          0, "harness", -1, "output",
          R"({"line":"WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 9050 closing signal SIGTERM","process":"launcher","stream":"stderr"})",
          100),
      event(1, "harness", -1, "output", R"({"line":"Sending process x closing signal SIGTERM"})",
            100),
      event(2, "harness", -1, "output", R"({"line":"Sending process 77 closing signal SIGKILL"})",
            100)};
  EXPECT_EQ(torchrun_closed(h),
            (std::map<int64_t, std::string>{{77, "SIGKILL"}, {9050, "SIGTERM"}}));
}

// Under one torchrun: rank 1 killed by the scenario at second 100; rank 0 failed in the same
// second with the peer's connection closed (its error file); torchrun ended both.
std::vector<HistoryEvent> killed_then_peer_failed() {
  return {
      event(0, "harness", 1, "fault_injected",
            R"({"fault":"signal","signal":"SIGKILL","pid":11,"at_step":5,"delivered":true})", 100),
      event(1, "rank", 0, "error", R"({"class":"comm","message":"Connection closed by peer"})",
            100),
      event(2, "harness", 0, "rank_exit", R"({"class":"error","code":1,"signaled":false})", 101),
      event(3, "harness", 1, "rank_exit", R"({"class":"signal","code":9,"signaled":true})", 101),
      event(4, "harness", 0, "worker_error",
            R"({"message":"RuntimeError: Connection closed by peer","timestamp":100})", 101)};
}

TEST(FirstFailure, TheScenariosKillComesBeforeThePeersErrorInTheSameSecond) {
  const auto f = first_failure(killed_then_peer_failed());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->how, "signal");
  EXPECT_EQ(f->message, "SIGKILL from the scenario's fault at step 5");
}

TEST(FirstFailure, AnErrorFileOfAnEarlierSecondIsFirst) {
  auto h = killed_then_peer_failed();
  h[4] = event(4, "harness", 0, "worker_error",
               R"({"message":"ValueError: loss is nan","timestamp":99})", 101);
  const auto f = first_failure(h);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 0);
  EXPECT_EQ(f->how, "error_file");
  EXPECT_EQ(f->message, "ValueError: loss is nan");
}

TEST(FirstFailure, ARankTornDownByTorchrunIsNeverFirst) {
  std::vector<HistoryEvent> h = {
      event(0, "harness", 0, "rank_exit",
            R"({"class":"signal","code":15,"signaled":true,"torn_down":true})", 100),
      event(1, "harness", 1, "rank_exit", R"({"class":"crash","code":11,"signaled":true})", 101)};
  const auto f = first_failure(h);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->how, "exit");
  EXPECT_EQ(f->message, "crash (signal 11)");
  h.pop_back();
  EXPECT_FALSE(first_failure(h));
}

}  // namespace
}  // namespace fl::harness
