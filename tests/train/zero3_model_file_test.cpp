// Model files under the real launcher (docs/workloads.md#model-files): rank 0 writing
// model.state_dict() at ZeRO-3 saves the size-0 placeholders and a later load fails with PyTorch's
// size mismatch (DeepSpeed#2413); the gathered 16-bit save (save_16bit_model) writes the full
// state dict from rank 0 alone and loads back to the same bytes. A load by a sharding spec reads
// the file on the group's rank 0 and broadcasts each tensor's shards: ranks given different
// specs call broadcasts of different sizes, and the collective check names them.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "base/exit_codes.hpp"
#include "tests/support/process.hpp"
#include "tests/support/train_run.hpp"

namespace fl::test {
namespace {

namespace fs = std::filesystem;

// The tiny model's first keys: vocab 64, d_model 32, seq_len 16.
const std::vector<std::pair<std::string, std::vector<int64_t>>> kFirstKeys = {
    {"wte.weight", {64, 32}}, {"wpe.weight", {16, 32}}, {"blocks.0.ln_1.weight", {32}}};

class Zero3ModelFile : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_test_dir("z3mf", testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `steps` steps on dp 2 at ZeRO `stage`, saving at the last with `extra`.
  TrainRun save(int stage, const std::string& out, std::vector<std::string> extra, int steps = 3) {
    std::vector<std::string> a = {"--dp",         "2",
                                  "--zero",       std::to_string(stage),
                                  "--save-every", std::to_string(steps),
                                  "--save-dir",   (dir_ / out).string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_train(FAULTLINE_TRAIN, 2, a, steps);
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  // The safetensors header and the data after it.
  static std::pair<nlohmann::ordered_json, std::string> parse(const fs::path& p) {
    const std::string bytes = read(p);
    uint64_t n = 0;
    EXPECT_GE(bytes.size(), 8u);
    std::memcpy(&n, bytes.data(), 8);
    return {nlohmann::ordered_json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
  }

  fs::path dir_;
};

TEST_F(Zero3ModelFile, ModelStateDictSavedAtStage3HoldsSizeZeroPlaceholdersAndFailsToLoad) {
  auto s = save(3, "a", {"--save-model-file", "state_dict"});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  const fs::path file = dir_ / "a" / "step_3" / "model.safetensors";
  auto [header, data] = parse(file);
  EXPECT_EQ(header["__metadata__"]["saved_as"], "state_dict");
  EXPECT_EQ(header["__metadata__"]["faultline"], "model file (not an engine checkpoint)");
  for (auto& [name, shape] : kFirstKeys) {
    EXPECT_EQ(header[name]["shape"], std::vector<int64_t>{0}) << name;
  }
  EXPECT_TRUE(header.contains("lm_head.weight"));
  EXPECT_TRUE(data.empty());
  // A fresh run without ZeRO-3 (the module whole) refuses every key.
  auto r = run_train(FAULTLINE_TRAIN, 2, {"--dp", "2", "--load-model-file", file.string()}, 2);
  EXPECT_EQ(r.proc.exit_code, exit_code::kCheckpoint) << r.proc.output;
  for (const char* line :
       {"Error(s) in loading state_dict for GPT:\n\tsize mismatch for wte.weight: copying a param "
        "with shape torch.Size([0]) from checkpoint, the shape in current model is "
        "torch.Size([64, 32]).",
        "\tsize mismatch for ln_f.bias: copying a param with shape torch.Size([0]) from "
        "checkpoint, the shape in current model is torch.Size([32])."}) {
    EXPECT_NE(r.proc.output.find(line), std::string::npos) << line << "\n" << r.proc.output;
  }
}

TEST_F(Zero3ModelFile, BelowStage3ModelStateDictHoldsTheFullShapes) {
  auto s = save(2, "a", {"--save-model-file", "state_dict"});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  auto [header, data] = parse(dir_ / "a" / "step_3" / "model.safetensors");
  for (auto& [name, shape] : kFirstKeys) EXPECT_EQ(header[name]["shape"], shape) << name;
  EXPECT_FALSE(data.empty());
}

TEST_F(Zero3ModelFile, TheGathered16BitSaveWritesTheFullStateDictFromRank0Alone) {
  auto s = save(3, "a", {"--save-model-file", "gathered_16bit", "--precision", "bf16"});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  const fs::path step = dir_ / "a" / "step_3";
  auto [header, data] = parse(step / "model.safetensors");
  size_t elements = 0;
  for (auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(e["dtype"], "BF16") << name;
    size_t n = 1;
    for (auto d : e["shape"]) n *= d.get<size_t>();
    elements += n;
  }
  for (auto& [name, shape] : kFirstKeys) EXPECT_EQ(header[name]["shape"], shape) << name;
  EXPECT_EQ(data.size(), elements * 2);
  // One model file (rank 0's; the other ranks' state dict is None), beside the engine's shards.
  std::vector<std::string> files;
  for (auto& e : fs::directory_iterator(step)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"manifest.json", "model.safetensors",
                                             "shard_rank0.bin", "shard_rank1.bin"}));
}

TEST_F(Zero3ModelFile, AGatheredFileLoadsBackToTheSameWeightsReadOrBroadcastBySpec) {
  auto s = save(3, "a", {"--save-model-file", "gathered_16bit"});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  const fs::path file = dir_ / "a" / "step_3" / "model.safetensors";
  const std::string saved = parse(file).second;
  // At lr 0 the step changes nothing: the next save holds exactly what was loaded.
  for (auto spec : {"", "dp:0:2", "world:1:2"}) {
    auto r = save(3, spec[0] ? "spec" : "plain",
                  {"--save-model-file", "gathered_16bit", "--lr", "0", "--load-model-file",
                   file.string(), "--load-shard-spec", spec},
                  1);
    ASSERT_EQ(r.proc.exit_code, 0) << spec << r.proc.output;
    EXPECT_EQ(parse(dir_ / (spec[0] ? "spec" : "plain") / "step_1" / "model.safetensors").second,
              saved)
        << spec;
    fs::remove_all(dir_ / "spec");
  }
}

// A full file loaded with a plain model.load_state_dict after deepspeed.initialize
// (--load-into module): at ZeRO-3 the module's parameters are size-0 placeholders and every key
// fails on every rank; at ZeRO-2 the module is whole and the same load works.
TEST_F(Zero3ModelFile, AFullFileLoadedIntoTheStage3ModuleMeetsItsPlaceholders) {
  auto s = save(0, "a", {"--save-model-file", "state_dict"});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  const std::string file = (dir_ / "a" / "step_3" / "model.safetensors").string();
  auto r = run_train(
      FAULTLINE_TRAIN, 2,
      {"--dp", "2", "--zero", "3", "--load-model-file", file, "--load-into", "module"}, 2);
  EXPECT_EQ(r.proc.exit_code, exit_code::kCheckpoint) << r.proc.output;
  const std::string line =
      "Error(s) in loading state_dict for GPT:\n\tsize mismatch for wte.weight: copying a param "
      "with shape torch.Size([64, 32]) from checkpoint, the shape in current model is "
      "torch.Size([0]).";
  EXPECT_NE(r.proc.output.find(line), std::string::npos) << r.proc.output;
  EXPECT_TRUE(r.steps.empty()) << r.proc.output;
  auto ok = run_train(
      FAULTLINE_TRAIN, 2,
      {"--dp", "2", "--zero", "2", "--load-model-file", file, "--load-into", "module"}, 2);
  EXPECT_EQ(ok.proc.exit_code, 0) << ok.proc.output;
}

TEST_F(Zero3ModelFile, RanksGivenDifferentShardingSpecsCallBroadcastsOfDifferentSizes) {
  auto s = save(3, "a", {"--save-model-file", "gathered_16bit"});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  const std::string file = (dir_ / "a" / "step_3" / "model.safetensors").string();
  const std::map<std::string, std::string> verify = {{"FAULTLINE_COMM_VERIFY", "1"}};
  auto r = run_train(FAULTLINE_TRAIN, 2,
                     {"--dp", "2", "--zero", "3", "--load-model-file", file, "--load-shard-spec",
                      "dp:0:2,r1=dp:0:1"},
                     2, verify);
  EXPECT_EQ(r.proc.exit_code, exit_code::kCommMismatch) << r.proc.output;
  EXPECT_NE(r.proc.output.find("collective mismatch on group 'dp': rank 1 called broadcast(count "
                               "2048, dtype fp32, root 0) at seq 0; rank 0 called broadcast(count "
                               "1024, dtype fp32, root 0) at seq 0"),
            std::string::npos)
      << r.proc.output;
  auto same = run_train(FAULTLINE_TRAIN, 2,
                        {"--dp", "2", "--zero", "3", "--load-model-file", file, "--load-shard-spec",
                         "dp:0:2,r1=dp:0:2"},
                        2, verify);
  EXPECT_EQ(same.proc.exit_code, 0) << same.proc.output;
}

// `name N` of rank 0's --memory-report line (bytes), -1 when absent.
double reported(const std::string& out, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("memory rank 0:[^\n]* " + name + " (\\d+)"))) return -1;
  return std::stod(m[1]);
}

// The gathered 16-bit save gathers one module (parameter group) at a time. Re-partitioned as
// each context exits (DeepSpeed PR 1223), the save holds one group; left for the next use
// (modifier_rank=None before it), every group stays gathered and the save's peak is the whole
// 16-bit model. A budget between the two peaks fails the save alone, with the accountant's
// out-of-memory error in the gather; the files are the same bytes. Eight blocks, short sequences
// and small gradient buckets keep training's own transients below the whole model's 16-bit size.
TEST_F(Zero3ModelFile, TheGatheredSaveHoldsOneModuleUnlessItsWeightsWaitForTheirNextUse) {
  const std::vector<std::string> common = {"--save-model-file",
                                           "gathered_16bit",
                                           "--precision",
                                           "bf16",
                                           "--zero3-prefetch-bytes",
                                           "0",
                                           "--layers",
                                           "8",
                                           "--micro-batch",
                                           "1",
                                           "--seq-len",
                                           "4",
                                           "--reduce-bucket-size",
                                           "32768",
                                           "--memory-report"};
  auto with = [&](const char* release) {
    auto a = common;
    a.insert(a.end(), {"--gathered-release", release});
    return a;
  };
  auto exit = save(3, "exit", with("on_exit"), 2);
  auto next = save(3, "next", with("next_use"), 2);
  ASSERT_EQ(exit.proc.exit_code, 0) << exit.proc.output;
  ASSERT_EQ(next.proc.exit_code, 0) << next.proc.output;
  const std::string file = "step_2/model.safetensors";
  EXPECT_EQ(read(dir_ / "exit" / file), read(dir_ / "next" / file));
  // Stage 3 in bf16: `params` is the rank's partition, 2 bytes each; the whole model is dp of
  // them less the padding of the last partition.
  const double params = reported(next.proc.output, "params");
  const double whole = reported(next.proc.output, "gathers");
  ASSERT_GT(params, 0) << next.proc.output;
  EXPECT_LE(whole, 2 * params);
  EXPECT_GE(whole, 2 * params - 2 * 2);
  EXPECT_EQ(reported(exit.proc.output, "gathers"), reported(exit.proc.output, "layer"))
      << exit.proc.output;
  const double low = reported(exit.proc.output, "peak"), high = reported(next.proc.output, "peak");
  ASSERT_LT(low, high);
  const std::map<std::string, std::string> budget = {
      {"FAULTLINE_MEMORY_BUDGET_BYTES", std::to_string(static_cast<int64_t>((low + high) / 2))}};
  auto a = with("next_use");
  a.insert(a.end(), {"--dp", "2", "--zero", "3", "--save-every", "2", "--save-dir",
                     (dir_ / "budget").string()});
  auto oom = run_train(FAULTLINE_TRAIN, 2, a, 2, budget);
  EXPECT_EQ(oom.proc.exit_code, exit_code::kOutOfMemory) << oom.proc.output;
  EXPECT_NE(oom.proc.output.find("for 'gather.params'"), std::string::npos) << oom.proc.output;
  EXPECT_EQ(oom.steps.size(), 2u) << oom.proc.output;  // both steps trained; the save failed
  auto b = with("on_exit");
  b.insert(b.end(), {"--dp", "2", "--zero", "3", "--save-every", "2", "--save-dir",
                     (dir_ / "budget_exit").string()});
  auto fits = run_train(FAULTLINE_TRAIN, 2, b, 2, budget);
  EXPECT_EQ(fits.proc.exit_code, 0) << fits.proc.output;
}

TEST_F(Zero3ModelFile, BadSpecsAndLayoutsAreConfigErrorsNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--load-model-file", "x", "--load-shard-spec", "dp:2:2"},
       "workload.checkpoint.load_shard_spec (--load-shard-spec) is 'dp:2:2' (allowed: empty, or "
       "GROUP:DIM:PARTS with GROUP world|dp, DIM 0|1 and PARTS >= 1, optionally followed by "
       ",rN=GROUP:DIM:PARTS for world rank N)"},
      {{"--load-model-file", "x", "--load-shard-spec", "dp:0:3"},
       "workload.checkpoint.load_shard_spec (--load-shard-spec) is 'dp:0:3': 3 parts do not "
       "divide dim 0 of wte.weight (torch.Size([64, 32])) (allowed: PARTS dividing every "
       "tensor's DIM)"},
      {{"--load-shard-spec", "dp:0:2"},
       "workload.checkpoint.load_shard_spec (--load-shard-spec) is 'dp:0:2' but "
       "workload.checkpoint.load_model_file (--load-model-file) is empty"},
      {{"--tp", "2", "--dp", "1", "--save-model-file", "gathered_16bit"},
       "workload.checkpoint.model_file (--save-model-file) is gathered_16bit but writes one file "
       "from rank 0 of a data-parallel job (allowed: none with tp 2 and pp 1)"},
      {{"--zero", "2", "--save-model-file", "gathered_16bit", "--gathered-release", "next_use"},
       "workload.checkpoint.gathered_release (--gathered-release) is next_use but this run saves "
       "gathered_16bit at ZeRO stage 2 (allowed: next_use only with gathered_16bit at stage 3, "
       "the save that gathers module by module)"}};
  for (auto& [args, text] : cases) {
    auto a = args;
    if (std::find(a.begin(), a.end(), "--tp") == a.end()) a.insert(a.begin(), {"--dp", "2"});
    auto r = run_train(FAULTLINE_TRAIN, 2, a, 1);
    EXPECT_EQ(r.proc.exit_code, exit_code::kUsage) << r.proc.output;
    EXPECT_NE(r.proc.output.find(text), std::string::npos) << text << "\n" << r.proc.output;
  }
}

// A wrapper's prefix (torch.compile's `_orig_mod.`) on every key of a saved model file, and the
// load's consume_prefix_in_state_dict_if_present: without it every key is missing and unexpected.
TEST_F(Zero3ModelFile, AWrappersPrefixIsSavedAndOnlyTheSamePrefixStripsIt) {
  auto s = save(0, "p", {"--save-model-file", "state_dict", "--save-key-prefix", "_orig_mod."});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  const fs::path file = dir_ / "p" / "step_3" / "model.safetensors";
  auto [header, data] = parse(file);
  EXPECT_TRUE(header.contains("_orig_mod.wte.weight"));
  EXPECT_FALSE(header.contains("wte.weight"));
  auto load = [&](const std::string& strip) {
    return run_train(FAULTLINE_TRAIN, 2,
                     {"--dp", "2", "--load-model-file", file.string(), "--strip-key-prefix", strip},
                     2);
  };
  auto wrong = load("module.");
  EXPECT_EQ(wrong.proc.exit_code, exit_code::kCheckpoint) << wrong.proc.output;
  EXPECT_NE(wrong.proc.output.find("\tUnexpected key(s) in state_dict: \"_orig_mod.wte.weight\""),
            std::string::npos)
      << wrong.proc.output;
  auto right = load("_orig_mod.");
  EXPECT_EQ(right.proc.exit_code, 0) << right.proc.output;
  EXPECT_EQ(right.steps.size(), 2u);
}

// What a load holds in host memory (FAULTLINE_HOST_MEMORY_BUDGET_BYTES): a module built without
// zero.Init holds its whole fp32 weights (30,080 parameters: 117.50 KiB) on every rank, and a
// rank that reads the file holds its bytes too. From_pretrained without the DeepSpeed config
// (Roblox/FAI-RL#66) does both on every rank; with zero.Init and rank 0 reading, the others hold
// one tensor at a time.
TEST_F(Zero3ModelFile, EveryRankLoadingTheWholeModelRunsOutOfHostMemoryRankZeroReadingDoesNot) {
  auto s = save(3, "a", {"--save-model-file", "gathered_16bit"});
  ASSERT_EQ(s.proc.exit_code, 0) << s.proc.output;
  const std::string file = (dir_ / "a" / "step_3" / "model.safetensors").string();
  const std::map<std::string, std::string> budget = {
      {"FAULTLINE_HOST_MEMORY_BUDGET_BYTES", "200000"}};
  auto load = [&](int stage, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--dp", "2", "--zero", std::to_string(stage), "--load-model-file",
                                  file};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_train(FAULTLINE_TRAIN, 2, a, 2, budget);
  };
  const std::string oom =
      "out of memory on host: tried to allocate 119.95 KiB for "
      "'load.model_file'; 117.50 KiB already allocated";
  auto whole = load(3, {"--no-zero-init"});
  EXPECT_EQ(whole.proc.exit_code, exit_code::kOutOfMemory) << whole.proc.output;
  // Both ranks run out at the same charge; the launcher stops the job at the first rank's exit,
  // which on a busy machine can come before the other has printed its own.
  int ranks_out = 0;
  for (const char* rank : {"[rank 0] ", "[rank 1] "}) {
    if (whole.proc.output.find(rank + oom) != std::string::npos) ++ranks_out;
  }
  EXPECT_GE(ranks_out, 1) << whole.proc.output;
  EXPECT_TRUE(whole.steps.empty());
  // zero.Init and rank 0 reading: the whole module exists nowhere, the file on rank 0 only.
  auto partitioned = load(3, {"--load-shard-spec", "world:0:1"});
  EXPECT_EQ(partitioned.proc.exit_code, 0) << partitioned.proc.output;
  EXPECT_EQ(partitioned.steps.size(), 2u);
  // Below stage 3 every module is whole: the reading rank alone goes over.
  auto stage2 = load(2, {"--load-shard-spec", "world:0:1"});
  EXPECT_EQ(stage2.proc.exit_code, exit_code::kOutOfMemory) << stage2.proc.output;
  EXPECT_NE(stage2.proc.output.find("[rank 0] " + oom), std::string::npos) << stage2.proc.output;
  EXPECT_EQ(stage2.proc.output.find("[rank 1] out of memory"), std::string::npos)
      << stage2.proc.output;
}

}  // namespace
}  // namespace fl::test
