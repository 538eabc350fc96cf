// The job-wide status (harness/history/job_status.hpp) over hand-written histories: who is
// missing, the collective a rank is in and since when, the moment a stopped run is seen at, and
// the faults counted per site, action and rank.
#include "harness/history/job_status.hpp"

#include <gtest/gtest.h>

namespace {

using fl::harness::HistoryEvent;
using fl::harness::JobStatusBuilder;

constexpr int64_t kS = 1'000'000'000;
const std::string kDelay = R"j({"site":"data.fetch","action":"delay(60)"})j";

HistoryEvent ev(const std::string& source, int rank, const std::string& kind, int64_t t_ns,
                const std::string& data = "{}", int64_t step = -1) {
  HistoryEvent e;
  e.source = source;
  e.rank = rank;
  e.kind = kind;
  e.t_ns = t_ns;
  e.step = step;
  e.data_json = data;
  return e;
}

// Two ranks launched at 0 that both reach step 1 at 1 s; then only rank 0 speaks: a heartbeat
// each second and, at 4.3 s, a stall report of an all-reduce in flight for 300 ms.
void rank1_goes_quiet(JobStatusBuilder& b) {
  b.add(ev("harness", -1, "run_start", 0, R"({"run_id":"r","scenario":"s","ranks":2})"));
  for (int r : {0, 1}) {
    b.add(ev("harness", r, "launch", 0));
    b.add(ev("rank", r, "step", 1 * kS, "{}", 1));
  }
  for (int t = 2; t <= 6; ++t) b.add(ev("rank", 0, "heartbeat", t * kS));
  b.add(ev("rank", 0, "collective", 4 * kS + kS / 10 * 3,
           R"({"op":"all_reduce","group":"dp","seq":4,"state":"started","in_flight_ms":300})"));
}

TEST(JobStatus, ARankSilentWhileAPeerReportsIsMissing) {
  JobStatusBuilder b;
  rank1_goes_quiet(b);
  const auto s = b.at(6 * kS);
  EXPECT_EQ(s.world, 2);
  EXPECT_EQ(s.alive(), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.missing(), std::vector<int>{1});
  EXPECT_EQ(s.max_step(), 1);
  EXPECT_EQ(s.ranks[0].coll_op, "all_reduce");
  EXPECT_EQ(s.ranks[0].coll_seq, 4);
  EXPECT_EQ(s.ranks[0].coll_since_ns, 4 * kS);  // the report's time less its 300 ms in flight
  EXPECT_TRUE(s.ranks[1].coll_op.empty());
  const auto j = fl::harness::status_json(s);
  EXPECT_EQ(j["ranks"][1]["state"], "missing");
  EXPECT_DOUBLE_EQ(j["ranks"][0]["collective"]["for_s"].get<double>(), 2.0);
}

TEST(JobStatus, NobodyIsMissingWhenEveryRankIsSilentOrWithinThreeSeconds) {
  JobStatusBuilder b;
  rank1_goes_quiet(b);
  EXPECT_TRUE(b.at(3 * kS).missing().empty());   // rank 1 quiet for 2 s only
  EXPECT_TRUE(b.at(20 * kS).missing().empty());  // both quiet: no peer went on
}

TEST(JobStatus, AStoppedRunIsSeenAsOfTheMomentTheHarnessStoppedIt) {
  JobStatusBuilder b;
  rank1_goes_quiet(b);
  b.add(ev("harness", -1, "watchdog_stop", 6 * kS + kS / 2, R"({"reason":"hang established"})"));
  b.add(ev("rank", 0, "heartbeat", 6 * kS + kS / 10 * 6));  // while it is torn down
  b.add(ev("rank", 0, "collective", 6 * kS + kS / 10 * 7,
           R"({"op":"all_reduce","group":"dp","seq":4,"state":"failed"})"));
  for (int r : {0, 1}) {
    b.add(ev("harness", r, "rank_exit", 7 * kS, R"({"class":"signal","by_harness":true})"));
  }
  b.add(ev("harness", -1, "run_end", 8 * kS, R"({"reason":"hang established"})"));
  const auto s = b.at(-1);
  EXPECT_FALSE(s.running);
  EXPECT_EQ(s.at_ns, 6 * kS + kS / 2);
  EXPECT_EQ(s.stop_reason, "hang established");
  EXPECT_EQ(s.alive(), (std::vector<int>{0, 1}));  // the teardown's exits come after
  EXPECT_EQ(s.missing(), std::vector<int>{1});
  EXPECT_EQ(s.ranks[0].last_event_ns, 6 * kS);
  EXPECT_EQ(s.ranks[0].coll_state, "started");
  // Seen later, the ranks have ended and wait in nothing.
  const auto after = b.at(9 * kS);
  EXPECT_TRUE(after.alive().empty());
  EXPECT_TRUE(after.ranks[0].coll_op.empty());
  EXPECT_EQ(after.ranks[0].exit_class, "signal");
}

TEST(JobStatus, AnEventWithAFieldOfAnotherTypeIsLeftOutNotThrown) {
  JobStatusBuilder b;
  b.add(ev("harness", -1, "run_start", 0, R"({"ranks":"two"})"));
  b.add(ev("rank", 0, "collective", kS, R"({"op":1,"state":"started"})"));
  b.add(ev("rank", 0, "step", kS, "{}", 3));
  const auto s = b.at(2 * kS);
  EXPECT_EQ(s.world, 0);
  EXPECT_TRUE(s.ranks.at(0).coll_op.empty());
  EXPECT_EQ(s.ranks.at(0).last_step, 3);
}

TEST(JobStatus, FaultsAreCountedPerSiteActionAndRank) {
  JobStatusBuilder b;
  b.add(ev("harness", -1, "run_start", 0, R"({"ranks":2})"));
  for (int i = 0; i < 3; ++i) {
    b.add(ev("rank", 1, "fault_fired", kS + i, kDelay));
  }
  b.add(ev("rank", 0, "fault_fired", kS, kDelay));
  b.add(ev("harness", 1, "fault_injected", 2 * kS, R"({"fault":"signal"})"));
  const auto s = b.at(3 * kS);
  ASSERT_EQ(s.faults.size(), 3u);
  EXPECT_EQ(s.faults[0].kind, "fault_fired");
  EXPECT_EQ(s.faults[0].rank, 0);
  EXPECT_EQ(s.faults[0].count, 1);
  EXPECT_EQ(s.faults[1].rank, 1);
  EXPECT_EQ(s.faults[1].count, 3);
  EXPECT_EQ(s.faults[1].action, "delay(60)");
  EXPECT_EQ(s.faults[2].kind, "fault_injected");
  EXPECT_EQ(s.faults[2].what, "signal");
  const std::string text = fl::harness::status_text(s);
  EXPECT_NE(text.find("data.fetch delay(60) on rank 1: fired 3 times"), std::string::npos) << text;
  EXPECT_NE(text.find("signal on rank 1: injected"), std::string::npos) << text;
}

}  // namespace
