// The tree join of MPI singletons without MPI: which ranks meet in which round, and that a
// partner's wait ends at the join's deadline (the rendezvous timeout), not at the store client's
// own 30 s default.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "workloads/comm/singleton_join.hpp"
#include "workloads/rendezvous/store_server.hpp"

namespace fl::comm {
namespace {

using std::chrono::milliseconds;

TEST(TreeJoinRounds, RankFiveOfSixConnectsTwiceAndSitsTheMiddleRoundOut) {
  const auto rounds = tree_join_rounds(5, 6);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0].block_size, 1);
  EXPECT_FALSE(rounds[0].accepting);
  EXPECT_TRUE(rounds[0].leader);
  EXPECT_EQ(rounds[0].port_key(), "mpi/tree/1/4");
  EXPECT_EQ(rounds[0].connecting_key(), "mpi/tree/1/4/connecting");
  EXPECT_EQ(rounds[0].partner_first, 4);
  EXPECT_EQ(rounds[0].partner_last, 4);
  EXPECT_EQ(rounds[1].block_size, 4);  // block {4,5} had no partner in the round of 2
  EXPECT_FALSE(rounds[1].accepting);
  EXPECT_FALSE(rounds[1].leader);
  EXPECT_EQ(rounds[1].port_key(), "mpi/tree/4/0");
  EXPECT_EQ(rounds[1].partner_first, 0);
  EXPECT_EQ(rounds[1].partner_last, 3);
}

TEST(TreeJoinRounds, RankZeroOfSixAcceptsInEveryRoundAndLeadsEach) {
  const auto rounds = tree_join_rounds(0, 6);
  ASSERT_EQ(rounds.size(), 3u);
  for (const auto& r : rounds) {
    EXPECT_TRUE(r.accepting);
    EXPECT_TRUE(r.leader);
    EXPECT_EQ(r.pair, 0);
  }
  EXPECT_EQ(rounds[2].partner_first, 4);
  EXPECT_EQ(rounds[2].partner_last, 5);  // the last block is short
}

// Every round's two blocks agree on each other and on the key, and after the rounds every world
// size from 1 to 256 is one block: the merges, replayed, leave one communicator of every rank.
TEST(TreeJoinRounds, EveryWorldUpTo256EndsAsOneBlockInLog2Rounds) {
  for (int n = 1; n <= 256; ++n) {
    std::map<int, int> block_of;  // rank -> first rank of its communicator
    for (int r = 0; r < n; ++r) block_of[r] = r;
    std::map<int, std::vector<TreeJoinRound>> plan;
    size_t most = 0;
    for (int r = 0; r < n; ++r) {
      plan[r] = tree_join_rounds(r, n);
      most = std::max(most, plan[r].size());
    }
    int log2 = 0;
    while ((1 << log2) < n) ++log2;
    ASSERT_EQ(most, static_cast<size_t>(log2)) << n << " ranks";
    for (int b = 1; b < n; b *= 2) {
      std::map<std::string, std::set<int>> by_key;
      for (int r = 0; r < n; ++r) {
        for (const auto& round : plan[r]) {
          if (round.block_size != b) continue;
          ASSERT_EQ(block_of[r], r / b * b) << n << " ranks, rank " << r << ", blocks of " << b;
          ASSERT_EQ(block_of[round.partner_first], round.partner_first);
          by_key[round.port_key()].insert(r);
        }
      }
      for (const auto& [key, ranks] : by_key) {
        const int first = *ranks.begin();
        for (int r : ranks) block_of[r] = first;
      }
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(block_of[r], 0) << n << " ranks, rank " << r;
  }
}

class PartnerWait : public testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<rdzv::StoreServer>("127.0.0.1", 0);
    server_->start();
    // The client's own deadline is a minute: a wait that used it would not end at the join's.
    client_ = std::make_unique<rdzv::StoreClient>("127.0.0.1", server_->port(), milliseconds(60000),
                                                  milliseconds(5000));
  }
  std::unique_ptr<rdzv::StoreServer> server_;
  std::unique_ptr<rdzv::StoreClient> client_;
};

TEST_F(PartnerWait, ReturnsThePortOnceThePartnerPublishedIt) {
  const auto round = tree_join_rounds(1, 2)[0];
  std::thread partner([&] {
    rdzv::StoreClient c("127.0.0.1", server_->port(), milliseconds(5000), milliseconds(5000));
    c.set(round.port_key(), "port-of-rank-0");
  });
  EXPECT_EQ(
      wait_for_partner(*client_, round.port_key(), 1, round, JoinDeadline(milliseconds(20000))),
      "port-of-rank-0");
  partner.join();
}

TEST_F(PartnerWait, APartnerThatNeverComesEndsTheWaitAtTheRendezvousDeadlineNamingIt) {
  const auto round = tree_join_rounds(28, 32)[2];  // blocks of 4: ranks 28-31 connect to 24-27
  ASSERT_EQ(round.block_size, 4);
  try {
    wait_for_partner(*client_, round.port_key(), 28, round, JoinDeadline(milliseconds(300)));
    FAIL() << "no error";
  } catch (const rdzv::StoreError& e) {
    EXPECT_EQ(e.kind(), rdzv::StoreErrorKind::kKeyTimeout);
    const std::string prefix =
        "[rank 28] joining the MPI world (round of 4-rank blocks): ranks 24-27 did not come to "
        "accept within the rendezvous deadline of 300 ms (FAULTLINE_RDZV_TIMEOUT_MS, the "
        "scenario's timeouts.rendezvous_ms); the store said: rendezvous store get('mpi/tree/4/6') "
        "on 127.0.0.1:";
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
    // The store waited what was left of the join's 300 ms, not its client's own minute.
    const std::string what = e.what();
    const std::string within = "key did not appear within ";
    const auto at = what.find(within);
    ASSERT_NE(at, std::string::npos) << what;
    EXPECT_LE(std::stoll(what.substr(at + within.size())), 300) << what;
  }
}

TEST_F(PartnerWait, AnAcceptingRankNamesTheSingleRankThatDidNotConnect) {
  const auto round = tree_join_rounds(26, 32)[0];
  try {
    wait_for_partner(*client_, round.connecting_key(), 26, round, JoinDeadline(milliseconds(200)));
    FAIL() << "no error";
  } catch (const rdzv::StoreError& e) {
    const std::string prefix =
        "[rank 26] joining the MPI world (round of 1-rank blocks): rank 27 did not come to "
        "connect within the rendezvous deadline of 200 ms";
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
  }
}

}  // namespace
}  // namespace fl::comm
