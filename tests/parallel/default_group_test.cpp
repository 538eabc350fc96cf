// The default process group as the helpers see it in one process without a group: asking for the
// rank is torch.distributed's error, word for word; the no-group path is rank 0 of a world of 1.
#include <gtest/gtest.h>

#include "workloads/comm/default_group.hpp"

namespace fl::comm {
namespace {

TEST(DefaultGroup, WithoutAGroupGetRankIsPyTorchsErrorAndTheHelpersAnswerAWorldOfOne) {
  set_default_group(nullptr);
  EXPECT_FALSE(default_group_initialized());
  for (auto ask : {default_group_rank, default_group_size}) {
    try {
      ask();
      ADD_FAILURE() << "no error without a group";
    } catch (const CommError& e) {
      EXPECT_STREQ(e.what(),
                   "Default process group has not been initialized, please make sure to call "
                   "init_process_group.");
    }
  }
  EXPECT_EQ(rank_or_zero(), 0);
  EXPECT_EQ(world_size_or_one(), 1);
}

}  // namespace
}  // namespace fl::comm
