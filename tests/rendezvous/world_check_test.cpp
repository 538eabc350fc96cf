// The start-up world check, with ranks as threads against a real store: each launch
// misconfiguration gives its own error naming the ranks.
#include <gtest/gtest.h>

#include <thread>

#include "workloads/rendezvous/store_client.hpp"
#include "workloads/rendezvous/store_server.hpp"
#include "workloads/rendezvous/world_check.hpp"

namespace fl::rdzv {
namespace {

using std::chrono::milliseconds;

struct Outcome {
  bool ok = false;
  std::string error;
  WorldCheckFailure failure{};
};

// Runs check_world for each member on its own thread and client.
std::vector<Outcome> run_world(const std::vector<MemberInfo>& members,
                               milliseconds timeout = milliseconds(5000)) {
  StoreServer server("127.0.0.1", 0);
  server.start();
  std::vector<Outcome> out(members.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        StoreClient c("127.0.0.1", server.port(), milliseconds(10000), milliseconds(5000));
        check_world(c, members[i], timeout);
        out[i].ok = true;
      } catch (const WorldCheckError& e) {
        out[i].error = e.what();
        out[i].failure = e.failure();
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

MemberInfo member(int rank, int world, std::string run = "run", std::string hash = "h1") {
  return MemberInfo{rank, world, rank, std::move(run), std::move(hash), "node0", 1000 + rank};
}

TEST(WorldCheck, AgreeingWorldPasses) {
  std::vector<MemberInfo> ms;
  for (int r = 0; r < 8; ++r) ms.push_back(member(r, 8));
  for (auto& o : run_world(ms)) EXPECT_TRUE(o.ok) << o.error;
}

TEST(WorldCheck, WorldSizeMismatchNamesBothSides) {
  auto out = run_world({member(0, 4), member(1, 4), member(2, 4), member(3, 8)});
  for (auto& o : out) {
    EXPECT_EQ(o.failure, WorldCheckFailure::kWorldSizeMismatch);
    EXPECT_NE(o.error.find("rank 3 reports world size 8, ranks 0-2 report world size 4"),
              std::string::npos)
        << o.error;
  }
}

TEST(WorldCheck, RunIdAndConfigHashMismatches) {
  auto out = run_world({member(0, 3), member(1, 3, "other"), member(2, 3)});
  for (auto& o : out) {
    EXPECT_EQ(o.failure, WorldCheckFailure::kRunIdMismatch);
    EXPECT_NE(o.error.find("rank 1 has run id 'other', ranks 0,2 have run id 'run'"),
              std::string::npos)
        << o.error;
  }
  out = run_world({member(0, 2, "run", "aaa"), member(1, 2, "run", "bbb")});
  for (auto& o : out) {
    EXPECT_EQ(o.failure, WorldCheckFailure::kConfigHashMismatch) << o.error;
    EXPECT_NE(o.error.find("config hash mismatch"), std::string::npos) << o.error;
  }
}

TEST(WorldCheck, RankOutOfRange) {
  auto out = run_world({member(0, 3), member(1, 3), member(5, 3)});
  for (auto& o : out) {
    EXPECT_EQ(o.failure, WorldCheckFailure::kRankOutOfRange);
    EXPECT_NE(o.error.find("rank 5 (pid 1005 on host node0) is out of range for world size 3 "
                           "(allowed 0-2)"),
              std::string::npos)
        << o.error;
  }
}

TEST(WorldCheck, DuplicateRank) {
  auto out = run_world({member(0, 3), member(1, 3), member(1, 3)});
  for (auto& o : out) {
    EXPECT_EQ(o.failure, WorldCheckFailure::kDuplicateRank);
    EXPECT_NE(o.error.find("rank 1 is claimed by 2 processes (pid 1001 on host node0, pid 1001 "
                           "on host node0); no process has rank 2"),
              std::string::npos)
        << o.error;
  }
}

// A launcher started twice: the world forms from the first arrivals, and a later process with a
// rank a member already holds is told so (not let through to join a world it is not part of).
TEST(WorldCheck, AProcessBeyondTheWorldIsAClaimedTwiceError) {
  StoreServer server("127.0.0.1", 0);
  server.start();
  auto check = [&](const MemberInfo& m) {
    StoreClient c("127.0.0.1", server.port(), milliseconds(10000), milliseconds(5000));
    return check_world(c, m, milliseconds(5000));
  };
  std::thread first([&] { check(member(0, 2)); });
  std::thread second([&] { check(member(1, 2)); });
  first.join();
  second.join();
  MemberInfo extra = member(1, 2);
  extra.pid = 2001;
  try {
    check(extra);
    FAIL() << "a third process in a world of 2 passed the check";
  } catch (const WorldCheckError& e) {
    EXPECT_EQ(e.failure(), WorldCheckFailure::kDuplicateRank);
    EXPECT_NE(std::string(e.what()).find("rank 1 is claimed by 2 processes (pid 1001 on host "
                                         "node0, pid 2001 on host node0): this process arrived "
                                         "as number 3 in a world of 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(WorldCheck, MissingRankTimesOutListingWhoIsMissing) {
  auto t0 = std::chrono::steady_clock::now();
  auto out = run_world({member(0, 4), member(1, 4), member(3, 4)}, milliseconds(800));
  auto elapsed = std::chrono::steady_clock::now() - t0;
  for (auto& o : out) {
    EXPECT_EQ(o.failure, WorldCheckFailure::kMissingRanks);
    EXPECT_NE(o.error.find("3 of 4 ranks arrived (ranks 0-1,3); missing: rank 2"),
              std::string::npos)
        << o.error;
    EXPECT_NE(o.error.find("rendezvous timed out after"), std::string::npos) << o.error;
  }
  EXPECT_GE(elapsed, milliseconds(800));
}

TEST(WorldCheck, ValidateIsPureAndOrderIndependentForTheVerdict) {
  std::vector<MemberInfo> ms = {member(2, 3), member(0, 3), member(1, 3)};
  EXPECT_NO_THROW(validate_world(ms, 3));
  ms.pop_back();
  EXPECT_THROW(validate_world(ms, 3), WorldCheckError);
}

}  // namespace
}  // namespace fl::rdzv
