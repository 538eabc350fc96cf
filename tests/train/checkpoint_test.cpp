// Sharded checkpoints end to end under mpirun: resume is bitwise identical to an uninterrupted
// run; a missing shard, a corrupted shard, another layout and another format version each fail
// with their own message naming the file and rank.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "tests/support/process.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

class Checkpoints : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_test_dir("ckpt", testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }

  ProcessResult train(int ranks, std::vector<std::string> args) {
    auto argv = mpirun_prefix(ranks);
    argv.push_back(FAULTLINE_TRAIN);
    for (auto& a : args) argv.push_back(a);
    return run_process(argv, {{"MASTER_PORT", std::to_string(free_port())},
                              {"FAULTLINE_COMM_TIMEOUT_MS", "20000"}});
  }
  static std::map<std::string, std::string> checksums(const std::string& out) {
    std::regex re(R"(checksum rank (\d) \(dp \d+ tp \d+ pp \d+\): ([0-9a-f]{16}))");
    std::map<std::string, std::string> m;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
         ++it) {
      m[(*it)[1]] = (*it)[2];
    }
    return m;
  }
  // Saves step_4 of an 8-step run with the given layout.
  void save(int ranks, const std::vector<std::string>& layout) {
    auto args = layout;
    for (auto& a : std::vector<std::string>{"--steps", "8", "--save-every", "4", "--save-dir",
                                            dir_.string()}) {
      args.push_back(a);
    }
    auto r = train(ranks, args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_TRUE(fs::exists(dir_ / "step_4" / "manifest.json"));
  }
  fs::path dir_;
};

const std::vector<std::string> kLayout = {"--dp",   "2", "--tp",          "2",
                                          "--zero", "1", "--micro-batch", "4"};

TEST_F(Checkpoints, ResumeIsBitwiseIdenticalToAnUninterruptedRun) {
  save(4, kLayout);
  auto straight_args = kLayout;
  straight_args.insert(straight_args.end(), {"--steps", "8", "--checksum"});
  auto straight = train(4, straight_args);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto resumed_args = kLayout;
  resumed_args.insert(resumed_args.end(),
                      {"--steps", "8", "--checksum", "--resume", (dir_ / "step_4").string()});
  auto resumed = train(4, resumed_args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("# done: 4 steps"), std::string::npos) << resumed.output;
  auto a = checksums(straight.output), b = checksums(resumed.output);
  EXPECT_EQ(a.size(), 4u) << straight.output;
  EXPECT_EQ(a, b);
  // The manifest records what a loader needs to validate.
  std::ifstream in(dir_ / "step_4" / "manifest.json");
  auto m = nlohmann::json::parse(in);
  EXPECT_EQ(m["format_version"], 1);
  EXPECT_EQ(m["step"], 4);
  EXPECT_EQ(m["layout"]["dp"], 2);
  EXPECT_EQ(m["layout"]["tp"], 2);
  EXPECT_EQ(m["shards"].size(), 4u);
  EXPECT_EQ(m["shards"][3]["file"], "shard_rank3.bin");
  std::ifstream latest(dir_ / "latest");
  std::string l;
  std::getline(latest, l);
  EXPECT_EQ(l, "step_8");
}

TEST_F(Checkpoints, MissingShardIsNamed) {
  save(4, kLayout);
  fs::remove(dir_ / "step_4" / "shard_rank2.bin");
  auto args = kLayout;
  args.insert(args.end(), {"--steps", "8", "--resume", (dir_ / "step_4").string()});
  auto r = train(4, args);
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  EXPECT_NE(r.output.find("shard shard_rank2.bin for rank 2 is missing"), std::string::npos)
      << r.output;
}

TEST_F(Checkpoints, CorruptShardFailsItsChecksum) {
  save(4, kLayout);
  {
    std::fstream f(dir_ / "step_4" / "shard_rank1.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  auto args = kLayout;
  args.insert(args.end(), {"--steps", "8", "--resume", (dir_ / "step_4").string()});
  auto r = train(4, args);
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex(
          R"(shard shard_rank1.bin of rank 1 is corrupt: \d+ bytes with xxh64 [0-9a-f]{16}, the manifest says \d+ bytes with xxh64 [0-9a-f]{16})")))
      << r.output;
}

TEST_F(Checkpoints, AnotherLayoutIsRefusedAndPointsAtTheConversion) {
  save(2, {"--dp", "2", "--zero", "1", "--micro-batch", "4"});
  auto r = train(4, {"--dp", "4", "--zero", "1", "--micro-batch", "2", "--steps", "8", "--resume",
                     dir_.string()});
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  EXPECT_NE(r.output.find("was saved with layout dp 2 x tp 1 x pp 1 (ZeRO 1, world 2) but this "
                          "run is dp 4 x tp 1 x pp 1 (ZeRO 1, world 4)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("fl-ckpt reshard"), std::string::npos) << r.output;
}

TEST_F(Checkpoints, AnotherFormatVersionIsRefused) {
  save(2, {"--dp", "2", "--micro-batch", "4"});
  auto path = dir_ / "step_4" / "manifest.json";
  nlohmann::json m;
  {
    std::ifstream in(path);
    m = nlohmann::json::parse(in);
  }
  m["format_version"] = 2;
  std::ofstream(path) << m.dump(2);
  auto r = train(2, {"--dp", "2", "--micro-batch", "4", "--steps", "8", "--resume",
                     (dir_ / "step_4").string()});
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  EXPECT_NE(r.output.find("has format version 2, this build reads version 1"), std::string::npos)
      << r.output;
}

TEST_F(Checkpoints, ReshardToAnotherDataParallelSizeKeepsTheStateAndResumes) {
  save(2, {"--dp", "2", "--zero", "1", "--micro-batch", "4"});
  const auto out4 = dir_ / "dp4", out2 = dir_ / "back-to-dp2";
  auto r = run_process({FAULTLINE_CKPT, "reshard", "--in", (dir_ / "step_4").string(), "--out",
                        out4.string(), "--dp", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_process(
      {FAULTLINE_CKPT, "reshard", "--in", out4.string(), "--out", out2.string(), "--dp", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Parameters and optimizer state survive both conversions exactly.
  auto d0 = run_process({FAULTLINE_CKPT, "digest", (dir_ / "step_4").string()});
  auto d4 = run_process({FAULTLINE_CKPT, "digest", out4.string()});
  auto d2 = run_process({FAULTLINE_CKPT, "digest", out2.string()});
  ASSERT_EQ(d0.exit_code, 0) << d0.output;
  EXPECT_EQ(d0.output, d4.output);
  EXPECT_EQ(d0.output, d2.output);
  auto inspect = run_process({FAULTLINE_CKPT, "inspect", out4.string()});
  EXPECT_NE(inspect.output.find("layout: world 4 = dp 4 x tp 1 x pp 1, ZeRO 1"), std::string::npos)
      << inspect.output;
  // And training resumes on the new layout.
  auto t = train(4, {"--dp", "4", "--zero", "1", "--micro-batch", "2", "--steps", "6", "--resume",
                     out4.string()});
  EXPECT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("# done: 2 steps"), std::string::npos) << t.output;
}

}  // namespace
}  // namespace fl::test
