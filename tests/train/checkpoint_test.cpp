// Sharded checkpoints end to end under mpirun: resume is bitwise identical to an uninterrupted
// run; a missing shard, a corrupted shard, another layout and another format version each fail
// with their own message naming the file and rank.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
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

// Stop 56: shards named by local rank. Every rank here is given local rank 0 (as one rank per
// node of four nodes would be): all four write shard_rank0.bin, the manifest lists that file four
// times with four checksums, and the resume fails on the ranks whose write was not the last.
TEST_F(Checkpoints, ShardsNamedByLocalRankOverwriteEachOtherAndTheResumeFailsAChecksum) {
  auto argv = mpirun_prefix(4);
  for (const char* a : {"-x", "LOCAL_RANK=0", FAULTLINE_TRAIN}) argv.push_back(a);
  for (const auto& a : kLayout) argv.push_back(a);
  for (const char* a : {"--steps", "4", "--save-every", "4", "--shard-name", "local_rank"}) {
    argv.push_back(a);
  }
  argv.push_back("--save-dir");
  argv.push_back(dir_.string());
  auto r = run_process(
      argv, {{"MASTER_PORT", std::to_string(free_port())}, {"FAULTLINE_COMM_TIMEOUT_MS", "20000"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir_ / "step_4" / "manifest.json");
  const auto m = nlohmann::json::parse(in);
  ASSERT_EQ(m["shards"].size(), 4u);
  for (const auto& e : m["shards"]) EXPECT_EQ(e["file"], "shard_rank0.bin") << e.dump();
  EXPECT_FALSE(fs::exists(dir_ / "step_4" / "shard_rank1.bin"));
  auto args = kLayout;
  args.insert(args.end(), {"--steps", "8", "--resume", (dir_ / "step_4").string()});
  r = train(4, args);
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  EXPECT_NE(r.output.find("shard shard_rank0.bin of rank "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" is corrupt: "), std::string::npos) << r.output;
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

// Issue 38 item 4: a checkpoint written by torch 1.6 (the zip format, file version 3) stops a
// torch 1.4 reader before anything is read, in torch's words; torch 1.7 reads it, and a 1.4
// writer's (legacy format, no version) is read by 1.4.
TEST_F(Checkpoints, ANewerTorchsCheckpointStopsAnOlderReaderInTorchsWords) {
  save(2, {"--dp", "2", "--micro-batch", "4", "--torch-version", "1.6.0"});
  std::ifstream manifest(dir_ / "step_4" / "manifest.json");
  EXPECT_EQ(nlohmann::json::parse(manifest).value("torch_file_version", 0), 3);
  const std::vector<std::string> resume = {"--dp",     "2",           "--micro-batch",
                                           "4",        "--steps",     "8",
                                           "--resume", dir_.string(), "--torch-version"};
  auto with = [&](const char* torch) {
    auto a = resume;
    a.push_back(torch);
    return train(2, a);
  };
  auto old = with("1.4.0");
  EXPECT_EQ(old.exit_code, exit_code::kCheckpoint) << old.output;
  EXPECT_NE(old.output.find("step_8: version_ <= kMaxSupportedFileFormatVersion INTERNAL ASSERT "
                            "FAILED at caffe2/serialize/inline_container.cc:132, please report a "
                            "bug to PyTorch. Attempted to read a PyTorch file with version 3, but "
                            "the maximum supported version for reading is 2. Your PyTorch "
                            "installation may be too old. (torch 1.4.0)"),
            std::string::npos)
      << old.output;
  EXPECT_EQ(with("1.7.0").exit_code, 0);
}

// A checkpoint saved from a DDP wrapper's state_dict() (every key "module."-prefixed):
// pytorch/pytorch#3805's failure, and both ways out of it.
TEST_F(Checkpoints, ADdpPrefixedStateDictFailsTheStrictResumeInPyTorchsWordsUntilStripped) {
  const std::vector<std::string> layout = {"--dp", "2", "--zero", "1", "--micro-batch", "4"};
  auto saved = layout;
  saved.insert(saved.end(), {"--steps", "8", "--save-every", "4", "--save-dir", dir_.string(),
                             "--save-key-prefix", "module.", "--checksum"});
  auto straight = train(2, saved);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  auto resume = [&](std::vector<std::string> extra) {
    auto args = layout;
    args.insert(args.end(), {"--steps", "8", "--checksum", "--resume", (dir_ / "step_4").string()});
    args.insert(args.end(), extra.begin(), extra.end());
    return train(2, args);
  };
  auto strict = resume({});
  EXPECT_EQ(strict.exit_code, exit_code::kCheckpoint) << strict.output;
  EXPECT_NE(strict.output.find("Error(s) in loading state_dict for GPT:\n\tMissing key(s) in "
                               "state_dict: \"wte.weight\", \"wpe.weight\", "
                               "\"blocks.0.ln_1.weight\""),
            std::string::npos)
      << strict.output;
  EXPECT_NE(strict.output.find("\"lm_head.weight\". \n\tUnexpected key(s) in state_dict: "
                               "\"module.wte.weight\", \"module.wpe.weight\""),
            std::string::npos)
      << strict.output;
  // Stripped, every key matches and the run ends bitwise where the uninterrupted one did.
  auto stripped = resume({"--strip-key-prefix", "module."});
  ASSERT_EQ(stripped.exit_code, 0) << stripped.output;
  EXPECT_NE(stripped.output.find("# load_state_dict: <All keys matched successfully>"),
            std::string::npos)
      << stripped.output;
  EXPECT_EQ(checksums(stripped.output), checksums(straight.output));
  // Not strict and not stripped: nothing loads, nothing fails, training goes on from the
  // initial weights (pytorch/examples#1029).
  auto loose = resume({"--load-strict", "false"});
  ASSERT_EQ(loose.exit_code, 0) << loose.output;
  EXPECT_NE(loose.output.find("# load_state_dict: _IncompatibleKeys(missing_keys=['wte.weight', "
                              "'wpe.weight', "),
            std::string::npos)
      << loose.output;
  EXPECT_NE(checksums(loose.output), checksums(straight.output));
  EXPECT_EQ(checksums(loose.output).size(), 2u) << loose.output;
  // A prefix no key has is the configuration's error, named.
  auto wrong = resume({"--strip-key-prefix", "_orig_mod."});
  EXPECT_EQ(wrong.exit_code, exit_code::kUsage) << wrong.output;
  EXPECT_NE(wrong.output.find("workload.checkpoint.strip_prefix (--strip-key-prefix) is "
                              "'_orig_mod.' but no key of checkpoint"),
            std::string::npos)
      << wrong.output;
}

TEST_F(Checkpoints, AnotherLayerCountFailsStrictAndLoadsTheSharedTensorsWhenNot) {
  const std::vector<std::string> layout = {"--dp", "2", "--micro-batch", "4"};
  auto saved = layout;
  saved.insert(saved.end(),
               {"--layers", "3", "--steps", "4", "--save-every", "4", "--save-dir", dir_.string()});
  ASSERT_EQ(train(2, saved).exit_code, 0);
  auto resume = [&](std::vector<std::string> extra) {
    auto args = layout;
    args.insert(args.end(), {"--layers", "2", "--steps", "6", "--resume", dir_.string()});
    args.insert(args.end(), extra.begin(), extra.end());
    return train(2, args);
  };
  auto strict = resume({});
  EXPECT_EQ(strict.exit_code, exit_code::kCheckpoint) << strict.output;
  EXPECT_NE(strict.output.find("Error(s) in loading state_dict for GPT:\n\tUnexpected key(s) in "
                               "state_dict: \"blocks.2.ln_1.weight\", \"blocks.2.ln_1.bias\", "),
            std::string::npos)
      << strict.output;
  auto loose = resume({"--load-strict", "false"});
  ASSERT_EQ(loose.exit_code, 0) << loose.output;
  EXPECT_NE(loose.output.find("# load_state_dict: _IncompatibleKeys(missing_keys=[], "
                              "unexpected_keys=['blocks.2.ln_1.weight', "),
            std::string::npos)
      << loose.output;
  EXPECT_NE(loose.output.find("# done: 2 steps"), std::string::npos) << loose.output;
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

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void write_json(const fs::path& p, const nlohmann::json& j) {
  std::ofstream(p, std::ios::trunc) << j.dump(2);
}

// A shard swap the manifest agrees with (files exchanged, their sizes and checksums exchanged
// in the manifest too) passes every checksum; only the shard's own header can tell.
TEST_F(Checkpoints, AConsistentlyRelabelledShardSwapIsRefusedByTheShardsOwnIdentity) {
  save(2, {"--dp", "2", "--zero", "1", "--micro-batch", "4"});
  const fs::path step = dir_ / "step_4";
  fs::rename(step / "shard_rank0.bin", step / "tmp.bin");
  fs::rename(step / "shard_rank1.bin", step / "shard_rank0.bin");
  fs::rename(step / "tmp.bin", step / "shard_rank1.bin");
  auto m = read_json(step / "manifest.json");
  for (const char* k : {"bytes", "xxh64"}) std::swap(m["shards"][0][k], m["shards"][1][k]);
  write_json(step / "manifest.json", m);
  auto r = train(2, {"--dp", "2", "--zero", "1", "--micro-batch", "4", "--steps", "8", "--resume",
                     step.string()});
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  // Both ranks refuse their shard; whichever reports first makes the launcher stop the other,
  // so either message may be the one printed. Each must name the swap the right way round.
  const std::regex swapped(
      R"(shard shard_rank([01])\.bin holds the state of rank ([01]) \(dp ([01]) tp 0 pp 0, ZeRO 1, )"
      R"(elements \d+\+\d+\) but is loaded as rank ([01]) \(dp ([01]) tp 0 pp 0, ZeRO 1)");
  std::smatch m2;
  ASSERT_TRUE(std::regex_search(r.output, m2, swapped)) << r.output;
  EXPECT_EQ(m2[1], m2[4]) << r.output;  // the file is the one loaded as that rank
  EXPECT_NE(m2[2], m2[4]) << r.output;  // and holds the other rank's state
  EXPECT_EQ(m2[2], m2[3]) << r.output;
  EXPECT_EQ(m2[4], m2[5]) << r.output;
  // The offline tools reassemble from the same shards and refuse them too.
  auto d = run_process({FAULTLINE_CKPT, "digest", step.string()});
  EXPECT_EQ(d.exit_code, exit_code::kCheckpoint) << d.output;
  EXPECT_NE(d.output.find("shards were swapped or relabelled"), std::string::npos) << d.output;
}

// Each malformed manifest is exit 27 with the key named; `latest` and step directories never
// lead outside the save directory; fl-ckpt honours the format version.
TEST_F(Checkpoints, MalformedManifestsAndPathsOutsideTheSaveDirectoryAreNamedErrors) {
  save(2, {"--dp", "2", "--micro-batch", "4"});
  const fs::path good = dir_ / "step_4";
  ASSERT_EQ(run_process({FAULTLINE_CKPT, "inspect", good.string()}).exit_code, 0);
  int n = 0;
  // A copy of the checkpoint with its manifest changed by `edit`; fl-ckpt `cmd` on it must exit
  // 27 saying `want`.
  auto refused = [&](const char* cmd, auto edit, const std::string& want) {
    const fs::path copy = dir_ / fmt::format("case{}", ++n) / "step_4";
    fs::create_directories(copy.parent_path());
    fs::copy(good, copy, fs::copy_options::recursive);
    auto m = read_json(copy / "manifest.json");
    edit(m);
    write_json(copy / "manifest.json", m);
    auto r = run_process({FAULTLINE_CKPT, cmd, copy.string()});
    EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << cmd << ": " << r.output;
  };
  refused(
      "inspect", [](auto& m) { m["layout"].erase("dp"); }, "manifest.json: layout.dp is missing");
  refused(
      "digest", [](auto& m) { m["shards"][1].erase("xxh64"); }, "shards[1].xxh64 is missing");
  refused(
      "inspect", [](auto& m) { m["step"] = "four"; },
      "manifest.json: step must be an integer, not \"four\"");
  // Once a segfault (an out-of-range index into the replicas).
  refused(
      "digest", [](auto& m) { m["shards"][1]["dp_rank"] = 7; },
      "shards[1].dp_rank is 7, allowed 0 to 1");
  refused(
      "digest", [](auto& m) { m["shards"][1]["dp_rank"] = 0; },
      "shards[1] repeats the coordinates dp 0 tp 0 pp 0 of another shard");
  refused(
      "inspect", [](auto& m) { m["format_version"] = 2; },
      "has format version 2, this build reads version 1");
  refused(
      "digest", [](auto& m) { m["format_version"] = 2; },
      "has format version 2, this build reads version 1");
  refused(
      "inspect", [](auto& m) { m["shards"][0]["file"] = "../../shard_rank0.bin"; },
      "the shard of rank 0 names '../../shard_rank0.bin', which is not a directory name "
      "inside it");

  // `latest` naming something outside, directly or through a symbolic link.
  const fs::path save = dir_ / "save", outside = dir_ / "elsewhere";
  fs::create_directories(save);
  fs::create_directories(outside);
  fs::copy(good, outside / "step_4", fs::copy_options::recursive);
  std::ofstream(save / "latest") << "../elsewhere/step_4\n";
  auto r = run_process({FAULTLINE_CKPT, "inspect", save.string()});
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  EXPECT_NE(r.output.find("its 'latest' file names '../elsewhere/step_4', which is not a "
                          "directory name inside it"),
            std::string::npos)
      << r.output;
  fs::create_directory_symlink(outside / "step_4", save / "step_9");
  std::ofstream(save / "latest", std::ios::trunc) << "step_9\n";
  r = run_process({FAULTLINE_CKPT, "inspect", save.string()});
  EXPECT_EQ(r.exit_code, exit_code::kCheckpoint) << r.output;
  EXPECT_NE(r.output.find("its 'latest' file leads to " + (outside / "step_4").string() +
                          ", outside the save directory"),
            std::string::npos)
      << r.output;
  // A step directory inside the save directory, reached through a link that stays inside, is
  // fine.
  fs::create_directory_symlink("step_9_real", save / "step_10");
  fs::copy(good, save / "step_9_real", fs::copy_options::recursive);
  std::ofstream(save / "latest", std::ios::trunc) << "step_10\n";
  r = run_process({FAULTLINE_CKPT, "inspect", save.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace fl::test
