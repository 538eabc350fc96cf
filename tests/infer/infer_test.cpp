// Sharded inference under mpirun: TP and PP layouts generate exactly the single-rank tokens;
// seeded top-k is reproducible; repeated sampled calls agree across TP ranks unless each rank
// adds its rank to the seed; every call's tokens reach the tokens file; a trained checkpoint
// continues the corpus's chain; a KV cache that does not fit the budget fails with the
// out-of-memory error naming it; a checkpoint of another partitioning is refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "tests/support/process.hpp"
#include "tests/support/scratch.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

ProcessResult launch(const char* binary, int ranks, std::vector<std::string> args,
                     std::map<std::string, std::string> env = {}) {
  auto argv = mpirun_prefix(ranks);
  argv.push_back(binary);
  for (auto& a : args) argv.push_back(a);
  env["MASTER_PORT"] = std::to_string(free_port());
  env["FAULTLINE_COMM_TIMEOUT_MS"] = "20000";
  return run_process(argv, env);
}

std::string tokens(const ProcessResult& r) {
  std::string out;
  std::regex re(R"((call \d+ )?request \d+:[^\n]*)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), re);
       it != std::sregex_iterator(); ++it) {
    out += it->str() + "\n";
  }
  return out;
}

TEST(Inference, TensorAndPipelineLayoutsGenerateTheSingleRankTokens) {
  auto ref = launch(FAULTLINE_INFER, 1, {});
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_FALSE(tokens(ref).empty()) << ref.output;
  for (auto [ranks, args] : std::vector<std::pair<int, std::vector<std::string>>>{
           {2, {"--tp", "2"}}, {2, {"--pp", "2"}}, {4, {"--tp", "2", "--pp", "2"}}}) {
    auto r = launch(FAULTLINE_INFER, ranks, args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(tokens(r), tokens(ref)) << args[0] << " " << args[1];
  }
}

// workload.infer.window: the window changes what is generated once the positions pass it, and
// tp 2 generates the single rank's tokens under it; Megatron's dynamic engine before Core 0.19.0
// ignored the model's window (NVIDIA/Megatron-LM pull request 5138), from 0.19.0 it applies it.
TEST(Inference, ASlidingWindowIsAppliedByEveryEngineButTheOldDynamicOne) {
  const std::vector<std::string> base = {"--prompt-len", "8", "--new-tokens", "8"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  auto full = launch(FAULTLINE_INFER, 1, base);
  auto window = launch(FAULTLINE_INFER, 1, with({"--attention-window", "4"}));
  auto window_tp = launch(FAULTLINE_INFER, 2, with({"--attention-window", "4", "--tp", "2"}));
  auto old_dynamic = launch(
      FAULTLINE_INFER, 1,
      with({"--attention-window", "4", "--engine", "dynamic", "--megatron-version", "0.18.0"}));
  auto new_dynamic = launch(
      FAULTLINE_INFER, 1,
      with({"--attention-window", "4", "--engine", "dynamic", "--megatron-version", "0.19.0"}));
  for (const auto* r : {&full, &window, &window_tp, &old_dynamic, &new_dynamic}) {
    ASSERT_EQ(r->exit_code, 0) << r->output;
    ASSERT_FALSE(tokens(*r).empty()) << r->output;
  }
  EXPECT_NE(tokens(window), tokens(full));
  EXPECT_EQ(tokens(window_tp), tokens(window));
  EXPECT_EQ(tokens(old_dynamic), tokens(full));
  EXPECT_EQ(tokens(new_dynamic), tokens(window));
}

TEST(Inference, SeededTopKIsReproducibleAndSeedDependent) {
  auto a = launch(FAULTLINE_INFER, 2, {"--tp", "2", "--top-k", "5", "--seed", "3"});
  auto b = launch(FAULTLINE_INFER, 2, {"--tp", "2", "--top-k", "5", "--seed", "3"});
  auto c = launch(FAULTLINE_INFER, 2, {"--tp", "2", "--top-k", "5", "--seed", "4"});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(tokens(a), tokens(b));
  EXPECT_NE(tokens(a), tokens(c));
}

TEST(Inference, RepeatedSampledCallsOnTensorParallelRanksGenerateTheSingleRankTokens) {
  const std::vector<std::string> args = {"--calls",       "3",   "--top-k", "5", "--top-p", "0.9",
                                         "--temperature", "1.5", "--seed",  "5"};
  auto ref = launch(FAULTLINE_INFER, 1, args);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  ASSERT_NE(tokens(ref).find("call 2 request 3:"), std::string::npos) << ref.output;
  auto with_tp = args;
  with_tp.insert(with_tp.end(), {"--tp", "2"});
  auto r = launch(FAULTLINE_INFER, 2, with_tp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(tokens(r), tokens(ref));
}

TEST(Inference, ASeedOffsetByRankMakesTensorParallelRanksDivergeAndOneByDpRankDoesNot) {
  const std::vector<std::string> args = {"--tp",          "2",   "--top-k", "8",
                                         "--temperature", "1.5", "--seed",  "3"};
  auto shared = launch(FAULTLINE_INFER, 2, args);
  ASSERT_EQ(shared.exit_code, 0) << shared.output;
  auto by_dp = args;
  by_dp.insert(by_dp.end(), {"--seed-offset", "dp_rank"});
  auto dp = launch(FAULTLINE_INFER, 2, by_dp);  // dp 1: both ranks add 0
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  EXPECT_EQ(tokens(dp), tokens(shared));
  auto by_rank = args;
  by_rank.insert(by_rank.end(), {"--seed-offset", "rank"});
  auto r = launch(FAULTLINE_INFER, 2, by_rank);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex(R"(\[rank [01]\] tensor-parallel outputs diverge: request \d+ position )"
                 R"(\d+ \(call 0\): tp rank 0 produced token \d+, tp rank 1 produced token )"
                 R"(\d+)")))
      << r.output;
}

TEST(Inference, RanksThatEndARequestAtDifferentStepsCallDifferentCollectives) {
  const std::vector<std::string> args = {
      "--tp",    "2", "--requests",    "1", "--prompt-len", "4",  "--new-tokens", "12",
      "--top-k", "4", "--temperature", "2", "--eos",        "30", "--seed",       "3"};
  const std::map<std::string, std::string> verify = {{"FAULTLINE_COMM_VERIFY", "1"}};
  auto shared = launch(FAULTLINE_INFER, 2, args, verify);
  EXPECT_EQ(shared.exit_code, 0) << shared.output;
  auto apart = args;
  apart.insert(apart.end(), {"--seed-offset", "rank"});
  auto r = launch(FAULTLINE_INFER, 2, apart, verify);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("collective mismatch on group 'tp': rank 1 called all_gather(count 1, "
                          "dtype int32) at seq "),
            std::string::npos)
      << r.output;
}

TEST(Inference, TheTokensFileHasEveryCallOfEveryRank) {
  fs::path dir = removed_at_exit(fs::temp_directory_path() /
                                 ("faultline-tokens-" + std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string file = (dir / "generations.jsonl").string();
  auto r = launch(FAULTLINE_INFER, 2,
                  {"--tp", "2", "--calls", "2", "--requests", "3", "--prompt-len", "2",
                   "--new-tokens", "4", "--tokens-file", file});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(file);
  std::map<std::pair<int, int>, nlohmann::json> lines;  // (rank, call) -> tokens
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("prompt_len"), 2);
    lines[{j.at("rank").get<int>(), j.at("call").get<int>()}] = j.at("tokens");
  }
  ASSERT_EQ(lines.size(), 4u);
  for (int call = 0; call < 2; ++call) {
    const auto& t = lines.at({0, call});
    ASSERT_EQ(t.size(), 3u);
    for (const auto& req : t) EXPECT_EQ(req.size(), 6u);
    EXPECT_EQ(t, lines.at({1, call}));
  }
  EXPECT_NE(lines.at({0, 0}), lines.at({0, 1}));  // the next prompts of the corpus
  fs::remove_all(dir);
}

TEST(Inference, TrainedCheckpointFollowsTheCorpusAndWrongPartitioningIsRefused) {
  fs::path dir = removed_at_exit(fs::temp_directory_path() /
                                 ("faultline-infer-" + std::to_string(::getpid())));
  fs::remove_all(dir);
  auto t = launch(FAULTLINE_TRAIN, 2,
                  {"--dp", "2", "--zero", "2", "--micro-batch", "4", "--steps", "100", "--save-dir",
                   dir.string()});
  ASSERT_EQ(t.exit_code, 0) << t.output;
  auto r = launch(FAULTLINE_INFER, 1, {"--checkpoint", dir.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.output, m, std::regex(R"(# (\d+) of (\d+) generated tokens follow)")))
      << r.output;
  EXPECT_GE(std::stoi(m[1]) * 10, std::stoi(m[2]) * 9) << r.output;  // at least 90%
  auto wrong = launch(FAULTLINE_INFER, 2, {"--tp", "2", "--checkpoint", dir.string()});
  EXPECT_EQ(wrong.exit_code, exit_code::kCheckpoint) << wrong.output;
  EXPECT_NE(wrong.output.find("is partitioned tp 1 x pp 1; this server is tp 2 x pp 1"),
            std::string::npos)
      << wrong.output;
  fs::remove_all(dir);
}

// workload.infer.meta_tensor (workloads/infer/meta_load.hpp): a model built on the meta device
// that no loader reads (AutoTP does not run at tp 1) fails the engine's move before DeepSpeed
// 0.12.6; from 0.12.6 (pull request 4692) the engine moves it with to_empty(), so every weight is
// uninitialized memory (zeros here) and generation goes on without an error: every logit is 0,
// every token the lowest id.
TEST(Inference, AMetaModelNobodyLoadsFailsTheMoveOrIsMovedWithToEmpty) {
  const std::vector<std::string> meta = {"--meta-tensor", "--injection", "autotp", "--model-class",
                                         "opt"};
  auto with = [&](const char* version) {
    std::vector<std::string> a = meta;
    a.insert(a.end(), {"--deepspeed-version", version});
    return a;
  };
  auto before = launch(FAULTLINE_INFER, 1, with("0.12.5"));
  EXPECT_EQ(before.exit_code, exit_code::kCheckpoint) << before.output;
  EXPECT_NE(before.output.find("NotImplementedError: Cannot copy out of meta tensor; no data!"),
            std::string::npos)
      << before.output;
  auto after = launch(FAULTLINE_INFER, 1, with("0.12.6"));
  ASSERT_EQ(after.exit_code, 0) << after.output;
  EXPECT_NE(after.output.find("uninitialized memory"), std::string::npos) << after.output;
  auto loaded = launch(FAULTLINE_INFER, 1, {});
  ASSERT_EQ(loaded.exit_code, 0) << loaded.output;
  // Each request's generated part (after '|') is all zeros only for the to_empty model.
  auto generated_all_zero = [](const std::string& t) {
    std::regex gen(R"(\|([ 0-9]+))");
    int lines = 0;
    for (auto it = std::sregex_iterator(t.begin(), t.end(), gen); it != std::sregex_iterator();
         ++it, ++lines) {
      if (!std::regex_match((*it)[1].str(), std::regex(R"((0 ?)+)"))) return false;
    }
    return lines > 0;
  };
  EXPECT_TRUE(generated_all_zero(tokens(after))) << tokens(after);
  EXPECT_FALSE(generated_all_zero(tokens(loaded))) << tokens(loaded);
  // The key names matter to kernel injection's meta loader only, and only OPT's and BLOOM's
  // files differ: anything else with wrapped keys is refused, naming why.
  auto refused = [](std::vector<std::string> args, const char* why) {
    args.insert(args.end(), {"--checkpoint-keys", "wrapped"});
    auto r = launch(FAULTLINE_INFER, 1, args);
    EXPECT_EQ(r.exit_code, exit_code::kUsage) << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
  };
  refused({}, "read only by the meta loader");
  refused({"--meta-tensor", "--injection", "kernel", "--model-class", "llama"},
          "is for model_class opt or bloom");
  refused({"--meta-tensor", "--injection", "autotp", "--model-class", "bloom"},
          "kernel injection's meta loader only");
}

TEST(Inference, KvCacheBeyondTheBudgetIsAnOutOfMemoryError) {
  auto ok = launch(FAULTLINE_INFER, 1, {"--requests", "4"},
                   {{"FAULTLINE_MEMORY_BUDGET_BYTES", "262144"}});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  auto r = launch(FAULTLINE_INFER, 1, {"--requests", "64"},
                  {{"FAULTLINE_MEMORY_BUDGET_BYTES", "262144"}});
  EXPECT_EQ(r.exit_code, exit_code::kOutOfMemory) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex(
          R"(out of memory on cpu: tried to allocate [0-9.]+ KiB for 'kv_cache\.h[01]\.[kv]')")))
      << r.output;
}

}  // namespace
}  // namespace fl::test
