// Timing oracles on synthetic histories: a busy host must not fake a symptom, and a real one must
// still show under load. Each history is written as the workers and the harness write it (launch,
// step events with interval_s / comm_s, rank exits, run_end).
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness {
namespace {

constexpr int64_t kMs = 1'000'000;

class HistoryBuilder {
 public:
  explicit HistoryBuilder(int ranks) : ranks_(ranks) {
    add("harness", -1, "run_start", -1, fmt::format("{{\"ranks\":{}}}", ranks), 0);
    for (int r = 0; r < ranks; ++r) add("harness", r, "launch", -1, "{}", 0);
  }
  // One synchronous step: every rank ends it at the same moment, after `interval` seconds, of
  // which comm[r] were spent in collectives.
  void step(int64_t n, double interval, const std::vector<double>& comm) {
    t_ += static_cast<int64_t>(interval * 1e9);
    for (int r = 0; r < ranks_; ++r) {
      add("rank", r, "step", n,
          fmt::format("{{\"loss\":2.0,\"step_time_s\":{},\"interval_s\":{},\"comm_s\":{}}}",
                      interval, interval, comm[static_cast<size_t>(r)]),
          t_ + r);
    }
  }
  // A step whose end finds mem[r] bytes in use on rank r (the workers' mem_current).
  void step_mem(int64_t n, const std::vector<int64_t>& mem) {
    t_ += 20 * kMs;
    for (int r = 0; r < ranks_; ++r) {
      add("rank", r, "step", n,
          fmt::format("{{\"loss\":2.0,\"step_time_s\":0.02,\"interval_s\":0.02,\"comm_s\":0.005,"
                      "\"mem_current\":{}}}",
                      mem[static_cast<size_t>(r)]),
          t_ + r);
    }
  }
  void pause(double seconds) { t_ += static_cast<int64_t>(seconds * 1e9); }
  // `seconds` pass; each of `ranks` sends a heartbeat every second of them (a live process's
  // probe or telemetry thread).
  void beat(double seconds, const std::vector<int>& ranks) {
    for (double s = 0; s < seconds; s += 1.0) {
      t_ += 1'000 * kMs;
      for (int r : ranks) add("rank", r, "heartbeat", -1, "{}", t_ + r);
    }
  }
  std::vector<HistoryEvent> finish() {
    t_ += 10 * kMs;
    for (int r = 0; r < ranks_; ++r) {
      add("harness", r, "rank_exit", -1, "{\"class\":\"ok\",\"code\":0}", t_);
    }
    add("harness", -1, "run_end", -1, "{}", t_ + 1);
    return events_;
  }
  // Any event `ms` milliseconds on, as a worker ("rank") or the harness writes it.
  void event(const std::string& source, int rank, const std::string& kind, const std::string& data,
             int64_t ms = 1) {
    t_ += ms * kMs;
    add(source, rank, kind, -1, data, t_);
  }
  int64_t now() const { return t_; }
  const std::vector<HistoryEvent>& events() const { return events_; }

 private:
  void add(const std::string& source, int rank, const std::string& kind, int64_t step,
           const std::string& data, int64_t t) {
    HistoryEvent e;
    e.index = events_.size();
    e.t_ns = t;
    e.source = source;
    e.rank = rank;
    e.kind = kind;
    e.step = step;
    e.data_json = data;
    events_.push_back(e);
  }
  int ranks_;
  int64_t t_ = 500 * kMs;  // starting took half a second
  std::vector<HistoryEvent> events_;
};

Expect throughput(int64_t after_step, double factor, bool absent = false) {
  Expect x = parse_expect_text(fmt::format(
      "{{oracle: throughput_degradation, after_step: {}, factor: {}}}", after_step, factor));
  x.symptom = "5.4";
  x.absent = absent;
  return x;
}

// Per-step jitter of a busy machine: each rank's compute is stretched by 1x-2.5x at random.
struct Load {
  std::mt19937 rng{7};
  double operator()() { return std::uniform_real_distribution<double>(1.0, 2.5)(rng); }
};

TEST(ThroughputOracle, HostBusyFromTheSplitOnIsNotASlowdown) {
  // No fault: two tensor-parallel ranks compute 4 ms per token. From step 4 a CPU hog makes
  // every rank 6x slower (the old before/after comparison saw a 6x "slowdown" here).
  HistoryBuilder h(2);
  Load load;
  for (int64_t s = 0; s < 12; ++s) {
    const double busy = s >= 4 ? 6.0 : 1.0;
    const double c0 = 0.004 * busy * load(), c1 = 0.004 * busy * load();
    const double interval = std::max(c0, c1) + 0.0005 * busy;
    h.step(s, interval, {interval - c0, interval - c1});
  }
  const auto v = judge(throughput(4, 5, true), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_NE(v.explanation.find("not observed"), std::string::npos) << v.explanation;
}

TEST(ThroughputOracle, SlowTensorParallelRankIsFoundOnABusyHost) {
  // Rank 1 computes 100 ms longer per token from step 4; rank 0 waits for it in the all-reduce.
  // The host is busy throughout (every compute stretched at random).
  HistoryBuilder h(2);
  Load load;
  for (int64_t s = 0; s < 12; ++s) {
    const double c0 = 0.004 * 3 * load();
    const double c1 = 0.004 * 3 * load() + (s >= 4 ? 0.1 : 0.0);
    const double interval = std::max(c0, c1) + 0.001;
    h.step(s, interval, {interval - c0, interval - c1});
  }
  const auto v = judge(throughput(4, 5), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.ranks, std::vector<int>{1});
  EXPECT_EQ(v.step, 4);
  EXPECT_NE(v.explanation.find("rank 1 computed"), std::string::npos) << v.explanation;
}

TEST(ThroughputOracle, StragglerAmongFourRanksIsLocalised) {
  HistoryBuilder h(4);
  for (int64_t s = 0; s < 16; ++s) {
    std::vector<double> compute{0.010, 0.011, 0.009, s >= 8 ? 0.6 : 0.010};
    const double interval = *std::max_element(compute.begin(), compute.end()) + 0.002;
    std::vector<double> comm;
    for (double c : compute) comm.push_back(interval - c);
    h.step(s, interval, comm);
  }
  const auto v = judge(throughput(8, 4), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.ranks, std::vector<int>{3});
}

TEST(ThroughputOracle, SlowLinkShowsAsTimeInCollectivesOnEveryRank) {
  // From step 8 every all-reduce crosses an 8 Mbit/s link: no rank computes longer, every rank
  // waits longer.
  HistoryBuilder h(2);
  Load load;
  for (int64_t s = 0; s < 40; ++s) {
    const double c0 = 0.003 * load(), c1 = 0.003 * load();
    const double comm = s >= 8 ? 0.5 : 0.002;
    const double interval = std::max(c0, c1) + comm;
    h.step(s, interval, {interval - c0, interval - c1});
  }
  const auto v = judge(throughput(8, 5), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.ranks, (std::vector<int>{0, 1}));
  EXPECT_NE(v.explanation.find("collectives slowed"), std::string::npos) << v.explanation;
}

TEST(ThroughputOracle, TooFewStepsOrOneRankIsUnknown) {
  HistoryBuilder h(1);
  for (int64_t s = 0; s < 10; ++s) h.step(s, 0.01, {0.0});
  EXPECT_EQ(judge(throughput(4, 5), h.finish()).outcome, "unknown");
  HistoryBuilder h2(2);
  for (int64_t s = 0; s < 3; ++s) h2.step(s, 0.01, {0.001, 0.001});
  EXPECT_EQ(judge(throughput(1, 5), h2.finish()).outcome, "unknown");
}

Expect hang(double hang_s, bool absent = false) {
  Expect x = parse_expect_text(fmt::format("{{oracle: hang, hang_s: {}}}", hang_s));
  x.symptom = "4.11";
  x.absent = absent;
  return x;
}

// A rank that the workers' configuration check stopped: `completed` fails and its explanation
// carries what the rank reported, not only its exit status (the run's summary prints it).
TEST(CompletedOracle, AFailedRankIsNamedWithTheErrorItReported) {
  HistoryBuilder h(2);
  const std::string msg =
      "num_attention_heads (4) must be a multiple of tensor_model_parallel_size (3).";
  h.event("rank", 1, "error",
          fmt::format(R"({{"class":"config","exit_code":2,"message":"{}"}})", msg));
  h.event("harness", 1, "rank_exit", R"({"class":"error","code":2})");
  h.event("harness", 0, "rank_exit", R"({"class":"ok","code":0})");
  h.event("harness", -1, "run_end", "{}");
  const Verdict v = judge(parse_expect_text("{oracle: completed}"), h.events());
  EXPECT_EQ(v.outcome, "fail");
  EXPECT_EQ(v.ranks, std::vector<int>{1});
  EXPECT_EQ(v.explanation, "rank 1 ended with error (exit 2): config error: " + msg);
}

// A rank that reported nothing keeps the plain explanation; another rank's error is not its own.
TEST(CompletedOracle, ARankWithoutAnErrorEventGetsOnlyItsExitStatus) {
  HistoryBuilder h(2);
  h.event("rank", 1, "error", R"({"class":"comm","exit_code":3,"message":"peer gone"})");
  h.event("harness", 0, "rank_exit", R"({"class":"signal","code":9,"signaled":true})");
  h.event("harness", 1, "rank_exit", R"({"class":"ok","code":0})");
  h.event("harness", -1, "run_end", "{}");
  const Verdict v = judge(parse_expect_text("{oracle: completed}"), h.events());
  EXPECT_EQ(v.outcome, "fail");
  EXPECT_EQ(v.explanation, "rank 0 ended with signal (signal 9)");
}

// A restarted rank is judged by its last incarnation: an error its earlier one reported is not
// the cause of the last one's end.
TEST(CompletedOracle, AnEarlierIncarnationsErrorIsNotTheLastOnesCause) {
  HistoryBuilder h(2);
  h.event("rank", 1, "error", R"({"class":"comm timeout","exit_code":3,"message":"peer gone"})");
  h.event("harness", 1, "rank_exit", R"({"class":"error","code":3})");
  h.event("harness", 1, "rank_exit", R"({"class":"signal","code":9,"signaled":true})", 500);
  h.event("harness", 0, "rank_exit", R"({"class":"ok","code":0})");
  h.event("harness", -1, "run_end", "{}");
  const Verdict v = judge(parse_expect_text("{oracle: completed}"), h.events());
  EXPECT_EQ(v.outcome, "fail");
  EXPECT_EQ(v.explanation, "rank 1 ended with signal (signal 9)");
}

TEST(HangOracle, SlowStartOnABusyHostIsNotAHang) {
  // Ranks take 8 s to reach their first step (a loaded machine joining the world), then train.
  HistoryBuilder h(4);
  h.pause(8.0);
  for (int64_t s = 0; s < 10; ++s) h.step(s, 0.05, {0.01, 0.01, 0.01, 0.01});
  const auto v = judge(hang(4, true), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  // While still starting, the runner must not end the run as hung either.
  HistoryBuilder starting(4);
  starting.pause(8.0);
  EXPECT_FALSE(hang_observed(hang(4), starting.events(), starting.now()));
}

TEST(HangOracle, GapIsJudgedAgainstTheJobsOwnPace) {
  // Steps of a busy host take 1 s each; one takes 4.5 s. Over hang_s (4 s) but not 5 intervals.
  HistoryBuilder h(2);
  for (int64_t s = 0; s < 6; ++s) h.step(s, 1.0, {0.1, 0.1});
  h.step(6, 4.5, {3.5, 0.1});
  for (int64_t s = 7; s < 10; ++s) h.step(s, 1.0, {0.1, 0.1});
  const auto v = judge(hang(4, true), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
}

TEST(HangOracle, SlowFirstStepsOnABusyHostAreNotAHang) {
  // Under 12 busy loops on 2 cores every step takes 4.6 s, the first one too (its ranks report
  // interval_s 4.6). The gap after step 0 is over hang_s (4 s), but it is the job's own pace.
  HistoryBuilder h(4);
  for (int64_t s = 0; s < 4; ++s) h.step(s, 4.6, {1.5, 1.5, 1.5, 1.5});
  const auto v = judge(hang(4, true), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  HistoryBuilder mid(4);
  for (int64_t s = 0; s < 1; ++s) mid.step(s, 4.6, {1.5, 1.5, 1.5, 1.5});
  mid.pause(4.5);
  EXPECT_FALSE(hang_observed(hang(4), mid.events(), mid.now()));
}

TEST(HangOracle, AStallRightAfterAQuickFirstStepIsAHang) {
  HistoryBuilder h(2);
  h.step(0, 0.5, {0.1, 0.1});
  h.pause(20.0);
  const auto v = judge(hang(4), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.step, 0);
}

TEST(HangOracle, StalledStepsAreAHangOnAnyHost) {
  HistoryBuilder h(4);
  for (int64_t s = 0; s < 4; ++s) h.step(s, 0.02, {0.005, 0.005, 0.005, 0.005});
  const int64_t stalled_at = h.now();
  h.pause(20.0);
  EXPECT_TRUE(hang_observed(hang(4), h.events(), h.now()));
  const auto v = judge(hang(4), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.step, 3);
  EXPECT_EQ(v.ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NEAR(v.manifested_s, static_cast<double>(stalled_at + 4'000 * kMs) / 1e9, 0.01);
}

TEST(HangOracle, TheFrozenRankIsNamedNotThePeerThatWaitsForIt) {
  // Rank 1 is stopped (SIGSTOP) after step 3: it says nothing more, while rank 0, blocked in the
  // all-reduce that waits for it, still beats. Only rank 1 is to blame.
  HistoryBuilder h(2);
  for (int64_t s = 0; s < 4; ++s) h.step(s, 0.02, {0.005, 0.005});
  h.beat(20.0, {0});
  const auto v = judge(hang(4), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.ranks, (std::vector<int>{1}));
  EXPECT_EQ(v.explanation,
            "no step progress for 4.0 s after step 3 while ranks 0-1 stayed alive; rank 1 sent "
            "nothing for 3 s before (frozen) while the others did (at 4.6 s)");
}

TEST(HangOracle, RanksThatAllStillBeatAreAllNamed) {
  // Both ranks wait in a collective that never completes, both alive and beating: nothing tells
  // one from the other, so both are named (as when neither beats).
  HistoryBuilder h(2);
  for (int64_t s = 0; s < 4; ++s) h.step(s, 0.02, {0.005, 0.005});
  h.beat(20.0, {0, 1});
  const auto v = judge(hang(4), h.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.ranks, (std::vector<int>{0, 1}));
}

Expect memory_growth(double factor, bool absent = false) {
  Expect x = parse_expect_text(fmt::format("{{oracle: memory_growth, factor: {}}}", factor));
  x.symptom = "4.2";
  x.absent = absent;
  return x;
}

constexpr int64_t kMiB = 1 << 20;

TEST(MemoryGrowthOracle, ALeakingRankIsFoundAndLocalised) {
  // Rank 1 keeps 4 MiB more after every step (activations held across steps); rank 0 is steady
  // after its first step, which allocates the optimizer state.
  HistoryBuilder b(2);
  b.step_mem(1, {40 * kMiB, 40 * kMiB});
  for (int64_t s = 2; s <= 12; ++s) b.step_mem(s, {60 * kMiB, 60 * kMiB + (s - 2) * 4 * kMiB});
  const auto v = judge(memory_growth(1.5), b.finish());
  EXPECT_EQ(v.outcome, "pass") << v.explanation;
  EXPECT_EQ(v.ranks, std::vector<int>{1});
  // The reference is the lower median of steps 2-4 (60, 64, 68 MiB: 64); 1.5x that, 96 MiB, is
  // first reached at step 11 (60 + 9 * 4).
  EXPECT_EQ(v.step, 11) << v.explanation;
  EXPECT_NE(v.explanation.find("rank 1"), std::string::npos) << v.explanation;
  const auto fix = judge(memory_growth(1.5, true), b.finish());
  EXPECT_EQ(fix.outcome, "fail") << fix.explanation;
}

TEST(MemoryGrowthOracle, SteadyMemoryAfterTheFirstStepIsNoGrowth) {
  // The first step grows memory 3x (optimizer state), then it stays within a few percent.
  HistoryBuilder b(2);
  b.step_mem(1, {20 * kMiB, 20 * kMiB});
  for (int64_t s = 2; s <= 12; ++s) {
    b.step_mem(s, {60 * kMiB + (s % 3) * kMiB, 61 * kMiB - (s % 2) * kMiB});
  }
  const auto v = judge(memory_growth(1.5), b.finish());
  EXPECT_EQ(v.outcome, "fail") << v.explanation;
  const auto fix = judge(memory_growth(1.5, true), b.finish());
  EXPECT_EQ(fix.outcome, "pass") << fix.explanation;
  EXPECT_NE(fix.explanation.find("largest"), std::string::npos) << fix.explanation;
}

TEST(MemoryGrowthOracle, WithoutMemoryReportsItIsUnknown) {
  HistoryBuilder b(2);
  for (int64_t s = 1; s <= 8; ++s) b.step(s, 0.02, {0.005, 0.005});
  const auto v = judge(memory_growth(1.5), b.finish());
  EXPECT_EQ(v.outcome, "unknown") << v.explanation;
}

}  // namespace
}  // namespace fl::harness
