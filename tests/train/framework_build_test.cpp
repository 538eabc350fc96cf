// What init_process_group checks of the framework's build (workload.versions.libuv, .backends;
// workloads/runtime/runtime.cpp): torch >= 2.4 creates its rendezvous store with libuv unless
// USE_LIBUV=0 (pytorch/pytorch#139990), and the default group's backend must be built in
// ("Distributed package doesn't have NCCL built in"). Each stops every rank before it connects;
// the settings that avoid it train.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

TrainRun train(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), {"--dp", "2"});
  return run_train(FAULTLINE_TRAIN, 2, args, 2, env);
}

bool says(const TrainRun& r, const std::string& text) {
  return r.proc.output.find(text) != std::string::npos;
}

const char* const kLibuv =
    "RuntimeError: use_libuv was requested but PyTorch was build without libuv support";

TEST(FrameworkBuild, ATorchWithoutLibuvStopsAtTheStoreFrom24To26UnlessUseLibuvSaysOtherwise) {
  ::unsetenv("USE_LIBUV");  // the ranks inherit this process's environment
  const auto no_libuv = train({"--torch-version", "2.5.1", "--torch-libuv", "false"});
  EXPECT_NE(no_libuv.proc.exit_code, 0);
  EXPECT_TRUE(says(no_libuv, kLibuv)) << no_libuv.proc.output;
  EXPECT_TRUE(no_libuv.steps.empty());

  const auto workaround =
      train({"--torch-version", "2.5.1", "--torch-libuv", "false"}, {{"USE_LIBUV", "0"}});
  EXPECT_EQ(workaround.proc.exit_code, 0) << workaround.proc.output;
  EXPECT_EQ(workaround.steps.size(), 2u);
  // Before 2.4 the store's default was the older backend; from 2.7 the Windows default is too
  // (pytorch PR 148266), unless USE_LIBUV=1 asks for libuv.
  const auto older = train({"--torch-version", "2.3.1", "--torch-libuv", "false"});
  EXPECT_EQ(older.proc.exit_code, 0) << older.proc.output;
  EXPECT_FALSE(says(older, kLibuv));
  const auto newer = train({"--torch-version", "2.7.0", "--torch-libuv", "false"});
  EXPECT_EQ(newer.proc.exit_code, 0) << newer.proc.output;
  const auto asked =
      train({"--torch-version", "2.7.0", "--torch-libuv", "false"}, {{"USE_LIBUV", "1"}});
  EXPECT_NE(asked.proc.exit_code, 0);
  EXPECT_TRUE(says(asked, kLibuv)) << asked.proc.output;
}

TEST(FrameworkBuild, TheDefaultGroupsBackendMustBeBuiltIn) {
  const auto nccl = train({"--torch-backends", "gloo"}, {{"FAULTLINE_BACKEND", "nccl"}});
  EXPECT_NE(nccl.proc.exit_code, 0);
  EXPECT_TRUE(says(nccl, "RuntimeError: Distributed package doesn't have NCCL built in"))
      << nccl.proc.output;
  EXPECT_TRUE(says(nccl, "the framework was built with gloo")) << nccl.proc.output;

  const auto gloo = train({"--torch-backends", "gloo"});  // the CPU data plane
  EXPECT_EQ(gloo.proc.exit_code, 0) << gloo.proc.output;
  EXPECT_EQ(gloo.steps.size(), 2u);
  const auto only_nccl = train({"--torch-backends", "nccl"});
  EXPECT_NE(only_nccl.proc.exit_code, 0);
  EXPECT_TRUE(says(only_nccl, "Distributed package doesn't have Gloo built in"))
      << only_nccl.proc.output;
}

}  // namespace
}  // namespace fl::test
