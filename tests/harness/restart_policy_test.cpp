// The runner's decision once every rank of an incarnation has ended (harness/run/
// restart_policy.hpp): a requested or fault-asked restart, a recovery tool's window, the end.
#include <gtest/gtest.h>

#include "harness/run/restart_policy.hpp"

namespace fl::harness {
namespace {

using Next = RestartPolicy::Next;

TEST(RestartPolicy, NothingAskedEndsTheRun) {
  RestartPolicy p;
  int asked = 0;
  const auto d = p.all_ranks_ended(
      false, [&] { return ++asked, false; }, "/run/checkpoints");
  EXPECT_EQ(d.next, Next::kEnd);
  EXPECT_EQ(asked, 1);  // the faults `at: exit` had their turn
  EXPECT_EQ(p.restarts(), 0);
}

TEST(RestartPolicy, RequestedRestartUsesItsCheckpointOnceAndCountsIt) {
  RestartPolicy p;
  p.request("/run/checkpoints-dp2-r1");
  EXPECT_TRUE(p.pending());
  int asked = 0;
  auto d = p.all_ranks_ended(
      false, [&] { return ++asked, true; }, "/run/checkpoints");
  EXPECT_EQ(d.next, Next::kRestart);
  EXPECT_EQ(d.from, "/run/checkpoints-dp2-r1");
  EXPECT_EQ(asked, 0);  // a pending request is not overridden by a fault's
  EXPECT_FALSE(p.pending());
  EXPECT_EQ(p.restarts(), 1);
  d = p.all_ranks_ended(
      false, [] { return false; }, "/run/checkpoints");
  EXPECT_EQ(d.next, Next::kEnd);  // the request was consumed
}

TEST(RestartPolicy, RequestFromStepZeroKeepsAnEmptyCheckpoint) {
  RestartPolicy p;
  p.request("");
  const auto d = p.all_ranks_ended(false, nullptr, "/run/checkpoints");
  EXPECT_EQ(d.next, Next::kRestart);
  EXPECT_EQ(d.from, "");
}

TEST(RestartPolicy, FaultAskingForARestartRestartsFromTheRunsCheckpoints) {
  RestartPolicy p;
  const auto d = p.all_ranks_ended(
      false, [] { return true; }, "/run/checkpoints");
  EXPECT_EQ(d.next, Next::kRestart);
  EXPECT_EQ(d.from, "/run/checkpoints");
  EXPECT_EQ(p.restarts(), 1);
}

TEST(RestartPolicy, StoppingRunNeitherRestartsNorAsksTheFaults) {
  RestartPolicy p;
  p.request("/run/checkpoints");
  bool asked = false;
  const auto d = p.all_ranks_ended(
      true, [&] { return asked = true; }, "/run/checkpoints");
  EXPECT_EQ(d.next, Next::kEnd);
  EXPECT_FALSE(asked);
  EXPECT_EQ(p.restarts(), 0);
}

TEST(RestartPolicy, FailureWithARecoveryToolOpensOneWindowThenWaits) {
  RestartPolicy p;
  p.attach_recovery();
  p.rank_failed();
  auto d = p.all_ranks_ended(false, nullptr, "/c");
  EXPECT_EQ(d.next, Next::kAwaitRecovery);
  EXPECT_TRUE(p.awaiting_recovery());
  d = p.all_ranks_ended(false, nullptr, "/c");
  EXPECT_EQ(d.next, Next::kWait);  // the window's timer ends the run, not this call
  EXPECT_EQ(p.all_ranks_ended(true, nullptr, "/c").next, Next::kEnd);
}

TEST(RestartPolicy, RestartDuringTheWindowClosesItAndStartsAFreshIncarnation) {
  RestartPolicy p;
  p.attach_recovery();
  p.rank_failed();
  ASSERT_EQ(p.all_ranks_ended(false, nullptr, "/c").next, Next::kAwaitRecovery);
  p.request("/c");
  ASSERT_EQ(p.all_ranks_ended(false, nullptr, "/c").next, Next::kRestart);
  EXPECT_FALSE(p.awaiting_recovery());
  // The new incarnation ended cleanly: its predecessor's failure is not counted again.
  EXPECT_EQ(p.all_ranks_ended(false, nullptr, "/c").next, Next::kEnd);
}

TEST(RestartPolicy, FailureWithoutARecoveryToolEndsTheRun) {
  RestartPolicy p;
  p.rank_failed();
  EXPECT_EQ(p.all_ranks_ended(false, nullptr, "/c").next, Next::kEnd);
}

}  // namespace
}  // namespace fl::harness
