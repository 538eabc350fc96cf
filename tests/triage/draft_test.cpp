// faultline triage's drafted scenario: adapted to what the input says with each value's source
// line, it loads as `faultline validate` loads a file; --write keeps an existing file; a cause
// faultline has no mechanism for is said plainly; every draft over the tune corpus validates.
#include "harness/triage/draft.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/utf8.hpp"
#include "harness/triage/draft_base.hpp"
#include "harness/triage/draft_check.hpp"
#include "tests/triage/tables.hpp"

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

using test::tables;

const std::vector<ScenarioSource>& sources() {
  static const auto s = load_scenario_sources(default_scenario_dirs());
  return s;
}

Draft draft_of(const std::string& text) {
  std::istringstream in(text);
  const auto input = read_input(in, 16u << 20);
  return draft_scenario(triage(input, tables()), input.text, tables(), sources(),
                        harness_validator(), {8, "issue.txt"});
}

// The comment lines right above `line` in `yaml` (the line must be there).
std::vector<std::string> comments_above(const std::string& yaml, const std::string& line) {
  std::vector<std::string> lines;
  std::istringstream in(yaml);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  const auto it = std::find(lines.begin(), lines.end(), line);
  EXPECT_NE(it, lines.end()) << line << " is not in\n" << yaml;
  std::vector<std::string> out;
  for (auto c = it; c != lines.begin() && (c - 1)->find("# ") != std::string::npos; --c) {
    out.insert(out.begin(), *(c - 1));
  }
  return out;
}

const std::string kWatchdogUnderZero3 =
    "deepspeed --num_gpus 4 train.py --deepspeed ds_config.json\n"
    "  \"zero_optimization\": {\"stage\": 3},\n"
    "  \"fp16\": {\"enabled\": true}, dtype=torch.float16\n"
    "[rank0]:[E ProcessGroupNCCL.cpp:523] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=9314, OpType=_REDUCE_SCATTER_BASE, NumelIn=131072000, NumelOut=32768000, "
    "Timeout(ms)=600000)\n";

TEST(TriageDraft, AWatchdogTimeoutUnderDeepspeedZero3DraftsAValidScenarioWithItsSourceLines) {
  const Draft d = draft_of(kWatchdogUnderZero3);
  ASSERT_TRUE(d.made) << d.why;
  EXPECT_EQ(d.base, "scenarios/symptoms/4.11-uneven-batches-hang.yaml");
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
  EXPECT_TRUE(d.dropped.empty()) << d.dropped.front();
  const YAML::Node doc = YAML::Load(d.yaml);
  EXPECT_EQ(doc["name"].as<std::string>(), "draft-uneven-batches-hang");
  EXPECT_EQ(doc["topology"]["launcher"].as<std::string>(), "deepspeed");
  EXPECT_EQ(doc["topology"]["ranks"].as<int>(), 4);
  EXPECT_EQ(doc["topology"]["zero"].as<int>(), 3);
  EXPECT_EQ(doc["workload"]["precision"].as<std::string>(), "fp16");
  EXPECT_EQ(doc["reference"]["kind"].as<std::string>(), "stands-for");
  EXPECT_EQ(doc["reference"]["symptom"].as<std::string>(), "4.11");
  EXPECT_EQ(doc["reference"]["root_cause"].as<std::string>(), "R4.6");
  EXPECT_EQ(doc["expect"]["oracle"].as<std::string>(), "hang");
  // The base's own fix variant (drop_last, F3), kept as it is.
  EXPECT_TRUE(doc["fix"]["workload"]["data"]["drop_last"].as<bool>());
  const std::string launch =
      "  # from line 1: `deepspeed --num_gpus 4 train.py --deepspeed ds_config.json`";
  EXPECT_EQ(comments_above(d.yaml, "  launcher: deepspeed"), std::vector<std::string>{launch});
  EXPECT_EQ(comments_above(d.yaml, "  ranks: 4"), std::vector<std::string>{launch});
  EXPECT_EQ(comments_above(d.yaml, "  zero: 3"),
            std::vector<std::string>{"  # from line 2: `\"zero_optimization\": {\"stage\": 3},`"});
  EXPECT_EQ(comments_above(d.yaml, "  precision: fp16"),
            std::vector<std::string>{
                "  # from line 3: `\"fp16\": {\"enabled\": true}, dtype=torch.float16`"});
  EXPECT_TRUE(d.unexpressed.empty()) << format_draft(d);
}

// DeepSpeed's configuration printout names every precision, switched off ones too: the draft
// takes the one set (fp16 here; before stop 64 it read bfloat16 from `bfloat16_enabled ... False`)
// and the stage and world size the printout gives. BF16 written in capitals maps to bf16.
TEST(TriageDraft, DeepSpeedsConfigurationPrintoutGivesTheDraftThePrecisionThatIsOn) {
  const std::string p = "[2024-07-10 14:14:51,801] [INFO] [config.py:1000:print]   ";
  const std::string hang =
      "[rank0]:[E ProcessGroupNCCL.cpp:523] [Rank 0] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=9314, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000)\n";
  const Draft d = draft_of(
      p + "bfloat16_enabled ............. False\n" + p + "fp16_enabled ................. True\n" +
      p + "world_size ................... 4\n" + p + "zero_optimization_stage ...... 1\n" + hang);
  ASSERT_TRUE(d.made) << d.why;
  const YAML::Node doc = YAML::Load(d.yaml);
  EXPECT_EQ(doc["workload"]["precision"].as<std::string>(), "fp16") << d.yaml;
  EXPECT_EQ(doc["topology"]["zero"].as<int>(), 1) << d.yaml;
  EXPECT_EQ(doc["topology"]["ranks"].as<int>(), 4) << d.yaml;
  const Draft capitals =
      draft_of("We train a 3.6b BF16 model with ZeRO stage 2 on 4 GPUs.\n" + hang);
  ASSERT_TRUE(capitals.made) << capitals.why;
  EXPECT_EQ(YAML::Load(capitals.yaml)["workload"]["precision"].as<std::string>(), "bf16")
      << capitals.yaml;
}

TEST(TriageDraft, AnIssueUrlInTheInputIsCitedWithItsLine) {
  const Draft d = draft_of("See https://github.com/deepspeedai/DeepSpeed/issues/5394 for more.\n" +
                           kWatchdogUnderZero3);
  ASSERT_TRUE(d.made) << d.why;
  const YAML::Node doc = YAML::Load(d.yaml);
  EXPECT_EQ(doc["reference"]["issue"].as<std::string>(), "deepspeedai/DeepSpeed#5394");
  EXPECT_EQ(doc["reference"]["url"].as<std::string>(),
            "https://github.com/deepspeedai/DeepSpeed/issues/5394");
  EXPECT_FALSE(doc["reference"]["kind"]);
  EXPECT_EQ(comments_above(d.yaml, "  issue: deepspeedai/DeepSpeed#5394").front(),
            "  # from line 1: `https://github.com/deepspeedai/DeepSpeed/issues/5394`");
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
}

TEST(TriageDraft, AWorldLargerThanTheMachineIsClampedAndSaidSo) {
  const Draft d = draft_of(
      "torchrun --nproc_per_node 16 train.py\n"
      "ModuleNotFoundError: No module named 'deepspeed'\n");
  ASSERT_TRUE(d.made) << d.why;
  EXPECT_EQ(YAML::Load(d.yaml)["topology"]["ranks"].as<int>(), 8);
  EXPECT_EQ(comments_above(d.yaml, "  ranks: 8"),
            (std::vector<std::string>{
                "  # from line 1: `torchrun --nproc_per_node 16 train.py`",
                "  # world size 16 clamped to 8: this machine runs at most 8 CPU ranks"}));
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
}

// Stop 66: GPUs stated in prose give the world of one node; with more nodes named the count may
// be per node or in all, and the draft keeps its base's ranks.
TEST(TriageDraft, GpusStatedInProseSetTheWorldOfOneNode) {
  const std::string hang =
      "[rank0]:[E ProcessGroupNCCL.cpp:523] [Rank 0] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=9314, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000)\n";
  const std::string prose = "I am trying to train Llama2-7B-fp16 using 6 V100.";
  const Draft d = draft_of(prose + "\n" + hang);
  ASSERT_TRUE(d.made) << d.why;
  EXPECT_EQ(YAML::Load(d.yaml)["topology"]["ranks"].as<int>(), 6) << d.yaml;
  EXPECT_EQ(comments_above(d.yaml, "  ranks: 6"),
            std::vector<std::string>{"  # from line 1: `" + prose + "`"});
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
  const Draft base = draft_of(hang);
  const Draft nodes = draft_of("We train on 3 nodes with 6 GPUs.\n" + hang);
  ASSERT_TRUE(base.made && nodes.made) << base.why << nodes.why;
  EXPECT_EQ(YAML::Load(nodes.yaml)["topology"]["ranks"].as<int>(),
            YAML::Load(base.yaml)["topology"]["ranks"].as<int>())
      << nodes.yaml;
  EXPECT_EQ(validate_scenario_text(nodes.yaml), "");
}

// The GPUs a job was given (CUDA_VISIBLE_DEVICES) or a collect_env lists are one node's: the world
// when no count is stated, x the nodes a report names; a count stated in prose wins over both.
TEST(TriageDraft, GpusMadeVisibleOrListedSetTheWorldWhenNoCountIsStated) {
  const std::string hang =
      "[rank0]:[E ProcessGroupNCCL.cpp:523] [Rank 0] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=9314, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=600000)\n";
  const auto listing = [](int gpus) {
    std::string text = "GPU models and configuration:\n";
    for (int i = 0; i < gpus; ++i) text += "GPU " + std::to_string(i) + ": Tesla V100-SXM2-16GB\n";
    return text;
  };
  const auto ranks = [](const Draft& d) {
    EXPECT_TRUE(d.made) << d.why;
    return d.made ? YAML::Load(d.yaml)["topology"]["ranks"].as<int>() : 0;
  };
  // The base's mechanism needs 4 ranks, so a smaller world would not show.
  const Draft d = draft_of(listing(6) + hang);
  EXPECT_EQ(ranks(d), 6) << d.yaml;
  EXPECT_EQ(comments_above(d.yaml, "  ranks: 6"),
            std::vector<std::string>{"  # from line 7: `GPU 5: Tesla V100-SXM2-16GB`"});
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
  const Draft two_nodes = draft_of("We train on 2 nodes.\n" + listing(3) + hang);
  EXPECT_EQ(ranks(two_nodes), 6) << two_nodes.yaml;
  const Draft stated = draft_of("I am training on 5 V100.\n" + listing(6) + hang);
  EXPECT_EQ(ranks(stated), 5) << stated.yaml;
  // The GPUs the job was given count before those the machine lists.
  const Draft visible =
      draft_of("CUDA_VISIBLE_DEVICES=0,1,2,3,4 python train.py\n" + listing(8) + hang);
  EXPECT_EQ(ranks(visible), 5) << visible.yaml;
}

// Stop 52: a source line in another script longer than a comment holds was cut inside a
// character, and the draft then failed to load ("the file is not UTF-8 text").
TEST(TriageDraft, ALongSourceLineInAnotherScriptIsCutBetweenCharacters) {
  std::string line = "deepspeed --num_gpus 4 train.py #";  // 33 bytes, then 3-byte characters
  for (int i = 0; i < 30; ++i) line += "\xE6\xB5\x8B";     // U+6D4B, 97 falls inside one
  const Draft d = draft_of(line + "\n" + kWatchdogUnderZero3);
  ASSERT_TRUE(d.made) << d.why;
  EXPECT_TRUE(is_valid_utf8(d.yaml));
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
  const std::vector<std::string> c = comments_above(d.yaml, "  launcher: deepspeed");
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front().rfind("  # from line 1: `deepspeed --num_gpus 4 train.py #", 0), 0u);
  EXPECT_NE(c.front().find("\xE6\xB5\x8B...`"), std::string::npos) << c.front();
}

// The report of a draft whose answer's cause its base cannot express ("" when it can).
std::string unexpressed_report(const std::string& input) {
  const Draft d = draft_of(input);
  EXPECT_TRUE(d.made) << d.why;
  return d.made && !d.cause_expressed() ? format_draft(d) : "";
}

// A cause some scenario builds, but for another symptom: R4.2 (components that do not work
// together) has bases for runtime errors, failing components, checkpoints and terminations, none
// for a slow run (4.1, here bandwidth lost with a new NCCL, NVIDIA/nccl#1222's lines).
TEST(TriageDraft, ACauseBuiltOnlyForAnotherSymptomIsSaidPlainly) {
  const std::string text = unexpressed_report(
      "torchrun --nproc_per_node 2 train.py\n"
      "The total bandwidth for a 4 nodes NCCL allreduce test dropped from 2.19.3 to 2.20.3\n"
      "  1073741824     268435456     float     sum      -1   5397.8  198.92  385.41      0   "
      "5419.5  198.12  383.87      0\n");
  EXPECT_NE(text.find("Could not express:\n"
                      "  - cause: root cause R4.2 (Incompatible component interaction): faultline "
                      "builds it only for symptom(s) 4.10, 4.12, 4.3, 4.5, 4.8, not for 4.1; the "
                      "draft reproduces 4.1 through R4.1 (its base's cause) instead\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  - setting: launcher torchrun (from line 1: `torchrun --nproc_per_node 2 "
                      "train.py`): the draft keeps launcher auto; faultline has no torchrun "
                      "launcher (it has local, mpirun, srun, deepspeed, command)\n"),
            std::string::npos)
      << text;
}

// A cause with a base for the very symptom that another base outscored: the report names the one
// not chosen instead of saying the cause is built only elsewhere (the Gemini base trains an MoE
// model, which this input never mentions).
TEST(TriageDraft, ACauseWhoseBaseForTheSymptomLostIsNamed) {
  const std::string text = unexpressed_report(
      "For now, ZeRO1 with gradient accumulation is not used in the plugin, which means users can "
      "not use booster and zero1+ga.\n");
  EXPECT_NE(
      text.find("  - cause: root cause R4.8 (Limited framework design and optimization): "
                "faultline builds it for 4.4 in scenarios/issues/"
                "gemini-moe-experts-without-tokens-fail-the-post-backward-check.yaml, but the "
                "draft's base, scenarios/issues/"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("builds it only for"), std::string::npos) << text;
}

// A cause no scenario builds at all (R1.6, a flawed framework API; R2.2 had none until stop 75,
// R4.8 until stop 71).
TEST(TriageDraft, ACauseWithoutAMechanismIsSaidPlainly) {
  const std::string text = unexpressed_report(
      "TypeError: Can't instantiate abstract class MPS_Accelerator with abstract methods "
      "handles_memory_backpressure\n"
      "    ds_accelerator = MPS_Accelerator()\n");
  EXPECT_NE(text.find("Could not express:\n"
                      "  - cause: root cause R1.6 (Flawed framework/API): no scenario or fault "
                      "kind of faultline builds it yet; the draft reproduces 1.2 through R1.1 "
                      "(its base's cause) instead\n"),
            std::string::npos)
      << text;
}

// Stop 75: a framework build without NCCL (R2.2) and a component never installed (R1.3, for 1.2)
// draft from the bases that build them.
TEST(TriageDraft, AMissingBuildOrComponentDraftsFromItsOwnBase) {
  const std::pair<const char*, const char*> cases[] = {
      {"dist.init_process_group(backend='nccl', init_method='env://', world_size=world_size, "
       "rank=rank)\n"
       "RuntimeError: Distributed package doesn't have NCCL built in\n",
       "scenarios/issues/process-group-asks-for-nccl-the-build-lacks.yaml"},
      {"ModuleNotFoundError: No module named 'apex'\n",
       "scenarios/issues/apex-not-installed-fused-adam-import.yaml"}};
  for (const auto& [input, base] : cases) {
    const Draft d = draft_of(input);
    ASSERT_TRUE(d.made) << d.why;
    EXPECT_TRUE(d.cause_expressed()) << format_draft(d);
    EXPECT_EQ(d.base, base);
  }
}

// Since stop 71 a slowdown ZeRO-3 shows against ZeRO-2 (R4.8) drafts from the base that builds
// it: two nodes over a slow link, ZeRO-3 against a ZeRO-2 reference run.
TEST(TriageDraft, ZeroThreeSlowerThanZeroTwoDraftsFromItsOwnBase) {
  const Draft d = draft_of(
      "ZeRO stage 3 training is ten times slower than stage 2 with deepspeed on 8 GPUs; "
      "throughput drops from 40 to 4 samples/sec\n");
  ASSERT_TRUE(d.made) << d.why;
  EXPECT_TRUE(d.cause_expressed()) << format_draft(d);
  EXPECT_EQ(d.base, "scenarios/issues/zero3-gathers-over-slow-link.yaml");
  const YAML::Node doc = YAML::Load(d.yaml);
  EXPECT_EQ(doc["topology"]["zero"].as<int>(), 3) << d.yaml;
  EXPECT_EQ(doc["baseline"]["topology"]["zero"].as<int>(), 2) << d.yaml;
}

// Stop 47: an adaptation that would change a key the base's mechanism needs (reference.needs) is
// left out and listed with the reason; before, these drafts no longer reproduced their symptom.
TEST(TriageDraft, AKernelFaultKeepsTheRanksAndZeroStageItsTailNeeds) {
  const Draft d = draft_of(
      "Training crashes at the first optimizer step with the fused Adam kernel.\n"
      "deepspeed --num_gpus 8 pretrain.py --deepspeed ds_config.json\n"
      "  \"zero_optimization\": {\"stage\": 0},\n"
      "RuntimeError: CUDA error: an illegal memory access was encountered\n");
  ASSERT_TRUE(d.made) << d.why;
  ASSERT_EQ(d.base, "scenarios/symptoms/4.3-vectorised-kernel-without-tail.yaml");
  const YAML::Node doc = YAML::Load(d.yaml);
  // 3 ranks with ZeRO-1 leave each partition a tail; 8 ranks or ZeRO off would not.
  EXPECT_EQ(doc["topology"]["ranks"].as<int>(), 3) << d.yaml;
  EXPECT_EQ(doc["topology"]["dp"].as<int>(), 3);
  EXPECT_EQ(doc["topology"]["zero"].as<int>(), 1);
  EXPECT_EQ(doc["topology"]["launcher"].as<std::string>(), "deepspeed");  // not needed: kept
  EXPECT_EQ(doc["reference"]["needs"].size(), 3u);
  const std::string base = "scenarios/symptoms/4.3-vectorised-kernel-without-tail.yaml";
  EXPECT_EQ(d.dropped,
            (std::vector<std::string>{
                fmt::format("layout: topology.ranks 8: the mechanism of {} needs its "
                            "topology.ranks (3; its reference.needs)",
                            base),
                fmt::format("zero: topology.zero 0: the mechanism of {} needs its topology.zero "
                            "(1; its reference.needs)",
                            base)}));
  EXPECT_NE(format_draft(d).find("Left out of the draft (the scenario does not load with them, or "
                                 "its mechanism needs the base's value):\n  - layout: "),
            std::string::npos);
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
}

TEST(TriageDraft, APerRankLaunchLineFaultKeepsItsLauncher) {
  const Draft d = draft_of(
      "Serving with tensor parallelism fails on the first request.\n"
      "deepspeed --num_gpus 2 tools/run_text_generation_server.py --tensor-model-parallel-size 2\n"
      "[WARNING] Config parameter mp_size is deprecated use tensor_parallel.tp_size instead\n");
  ASSERT_TRUE(d.made) << d.why;
  ASSERT_EQ(d.base, "scenarios/symptoms/5.1-mismatched-batches-across-tp-ranks.yaml");
  const YAML::Node doc = YAML::Load(d.yaml);
  // The deepspeed runner starts every rank with one line: rank 1's own --requests 6 is lost.
  EXPECT_FALSE(doc["topology"]["launcher"]) << d.yaml;
  EXPECT_EQ(doc["topology"]["tp"].as<int>(), 2);
  ASSERT_EQ(d.dropped.size(), 1u);
  EXPECT_EQ(d.dropped.front(),
            "launcher: topology.launcher deepspeed: the mechanism of "
            "scenarios/symptoms/5.1-mismatched-batches-across-tp-ranks.yaml needs its "
            "topology.launcher (the default; its reference.needs)");
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
}

// Stop 50: the layout read holds the keys the base needs at its values and keeps the rest when
// they still divide: a base that needs its tp and pp still takes the world size read. Before, the
// whole layout was left out and the draft kept the base's 4 ranks.
TEST(TriageDraft, ABaseThatNeedsItsTpStillTakesTheWorldSizeRead) {
  const Draft d = draft_of(
      "Training hangs at the end of the first epoch when the last batch is uneven across ranks.\n"
      "deepspeed --num_gpus 8 pretrain_gpt.py --tensor-model-parallel-size 4\n"
      "The job stays stuck at the last step; one rank has no batch left, the others wait.\n");
  ASSERT_TRUE(d.made) << d.why;
  const std::string base = "scenarios/symptoms/4.11-uneven-batches-hang.yaml";
  ASSERT_EQ(d.base, base);
  const YAML::Node doc = YAML::Load(d.yaml);
  ASSERT_EQ(doc["topology"]["ranks"].as<int>(), 8) << d.yaml;
  EXPECT_EQ(doc["topology"]["dp"].as<int>(), 8);
  EXPECT_FALSE(doc["topology"]["tp"]) << d.yaml;
  const auto ranks_from = comments_above(d.yaml, "  ranks: 8");
  ASSERT_EQ(ranks_from.size(), 1u);
  EXPECT_EQ(ranks_from.front().find("  # from line 2: "), 0u) << ranks_from.front();
  EXPECT_EQ(comments_above(d.yaml, "  dp: 8"),
            (std::vector<std::string>{"  # ranks / (tp x pp) = 8 / (1 x 1); tp kept at the base's "
                                      "value (its reference.needs)"}));
  ASSERT_EQ(d.dropped.size(), 1u) << format_draft(d);
  EXPECT_EQ(d.dropped.front(),
            fmt::format("layout: topology.tp 4: the mechanism of {} needs its topology.tp (the "
                        "default; its reference.needs); the rest of the layout is kept",
                        base));
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
}

TEST(TriageDraft, NoOffloadOnADraftThatKeepsZeroStage0) {
  // A base at ZeRO stage 0 that needs it: the stage read is left out, and the optimizer offload
  // read beside it then has no partition to move (the workers refuse it; the loader does not).
  std::vector<ScenarioSource> bases;
  for (const auto& s : sources()) {
    if (s.name != "vectorised-kernel-without-tail") continue;
    bases.push_back(s);
    // reset, not `=`: assigning to a node that shares s.doc's would change the shared base that
    // the other tests of this process read.
    bases.back().doc.reset(YAML::Clone(s.doc));
    bases.back().doc["topology"].remove("zero");
  }
  ASSERT_EQ(bases.size(), 1u);
  std::istringstream in(
      "Training crashes at the first optimizer step with the fused Adam kernel.\n"
      "  \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}},\n"
      "RuntimeError: CUDA error: an illegal memory access was encountered\n");
  const auto input = read_input(in, 16u << 20);
  const Draft d = draft_scenario(triage(input, tables()), input.text, tables(), bases,
                                 harness_validator(), {8, "issue.txt"});
  ASSERT_TRUE(d.made) << d.why;
  const YAML::Node doc = YAML::Load(d.yaml);
  EXPECT_FALSE(doc["topology"]["zero"]) << d.yaml;
  EXPECT_FALSE(doc["workload"]["zero"]) << d.yaml;
  ASSERT_EQ(d.dropped.size(), 2u) << format_draft(d);
  EXPECT_EQ(d.dropped[1],
            "offload: the optimizer offload needs ZeRO stage 1, 2 or 3; the draft keeps stage 0");
}

// Stop 50: the same precondition from the other side: a base whose fault is its own optimizer
// offload keeps its ZeRO stage when the input reads stage 0 (the workers refuse the offload at
// stage 0, so the draft ran into a config error before).
TEST(TriageDraft, ABaseThatOffloadsKeepsItsZeroStage) {
  std::vector<ScenarioSource> bases;
  for (const auto& s : sources()) {
    if (s.name == "host-oom-caused-by-offload") bases.push_back(s);
  }
  ASSERT_EQ(bases.size(), 1u);
  std::istringstream in(
      "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n"
      "  \"zero_optimization\": {\"stage\": 0},\n");
  const auto input = read_input(in, 16u << 20);
  const Draft d = draft_scenario(triage(input, tables()), input.text, tables(), bases,
                                 harness_validator(), {8, "issue.txt"});
  ASSERT_TRUE(d.made) << d.why;
  const YAML::Node doc = YAML::Load(d.yaml);
  EXPECT_EQ(doc["topology"]["zero"].as<int>(), 2) << d.yaml;
  EXPECT_TRUE(doc["workload"]["zero"]["offload_optimizer"].as<bool>());
  ASSERT_EQ(d.dropped.size(), 1u) << format_draft(d);
  EXPECT_EQ(d.dropped.front(),
            "zero: topology.zero 0: the base's optimizer offload needs ZeRO stage 1, 2 or 3; the "
            "draft keeps its stage");
}

// Issue 34: the base shows the event the issue reports. Before, every 4.2 base named R4.5, so the
// first by file name won: a disk-full checkpoint error for a CUDA OOM.
TEST(TriageDraft, ACudaOomDraftsFromABaseWhoseOracleIsOom) {
  const Draft d = draft_of(
      "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total "
      "capacity)\n"
      "deepspeed --num_gpus 8 train.py --zero_stage 3\n");
  ASSERT_TRUE(d.made) << d.why;
  EXPECT_NE(d.base, "scenarios/symptoms/4.2-offload-disk-full.yaml");
  const YAML::Node doc = YAML::Load(d.yaml);
  EXPECT_EQ(doc["reference"]["symptom"].as<std::string>(), "4.2");
  EXPECT_EQ(doc["reference"]["root_cause"].as<std::string>(), "R4.5") << d.base;
  EXPECT_EQ(doc["expect"]["oracle"].as<std::string>(), "oom") << d.base;
  EXPECT_TRUE(d.cause_expressed()) << format_draft(d);
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
}

// A watchdog timeout at the first collective reads as 2.2. Its 2.2 bases: the firewall one
// (R2.3, a store error), and two of R2.1, the first collective timing out (comm_timeout) and a
// rank that never joins (a rendezvous error).
TEST(TriageDraft, AWatchdogTimeoutDraftsFromABaseWhoseOracleIsACommTimeoutOrAHang) {
  std::istringstream in(
      "[rank0]:[E ProcessGroupNCCL.cpp:523] [Rank 0] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
      "Timeout(ms)=1800000) ran for 1800466 milliseconds before timing out.\n");
  const auto input = read_input(in, 16u << 20);
  Result r = triage(input, tables());
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  ASSERT_EQ(r.symptoms.front().id, "2.2");
  const auto draft = [&] {
    return draft_scenario(r, input.text, tables(), sources(), harness_validator(),
                          {8, "issue.txt"});
  };
  // The tables name R2.3 first: the top root cause still comes first.
  ASSERT_EQ(r.root_causes.front().id, "R2.3");
  EXPECT_EQ(draft().base, "scenarios/symptoms/2.2-store-behind-firewall.yaml");
  // Named second (after a cause no 2.2 base builds), it yields to the base showing the timeout.
  r.root_causes.insert(r.root_causes.begin(), Candidate{"R4.7", 4.0, {}, "", {}});
  const Draft d = draft();
  ASSERT_TRUE(d.made) << d.why;
  const std::string oracle = YAML::Load(d.yaml)["expect"]["oracle"].as<std::string>();
  EXPECT_TRUE(oracle == "comm_timeout" || oracle == "hang") << d.base << ": " << oracle;
  EXPECT_EQ(d.base, "scenarios/symptoms/2.2-first-collective-timeout.yaml");
  EXPECT_EQ(validate_scenario_text(d.yaml), "");
}

// Two bases of one symptom and root cause (2.1 / R2.2: a torch build without what the job asks
// for): the one whose expected error is the line the issue quotes is drafted from, whatever
// their order by name.
TEST(TriageDraft, BetweenBasesOfOneCauseTheOneThatPrintsTheQuotedErrorIsChosen) {
  const auto base_for = [](const std::string& line) {
    std::istringstream in(line + "\n");
    const auto input = read_input(in, 16u << 20);
    Result r = triage(input, tables());
    EXPECT_EQ(r.kind, Result::Kind::kFound) << line;
    if (r.kind != Result::Kind::kFound) return std::string();
    Candidate top = r.symptoms.front();
    top.id = "2.1";
    top.evidence = {{1, line, ""}};
    r.symptoms = {top};
    r.root_causes = {Candidate{"R2.2", 4.0, {}, "", {}}};
    return choose_base(r, sources(), BaseQuery{})->shown;
  };
  EXPECT_EQ(base_for("RuntimeError: use_libuv was requested but PyTorch was build without libuv "
                     "support"),
            "scenarios/issues/tcpstore-asks-for-libuv-the-build-lacks.yaml");
  EXPECT_EQ(base_for("RuntimeError: Distributed package doesn't have NCCL built in"),
            "scenarios/issues/process-group-asks-for-nccl-the-build-lacks.yaml");
  // A line neither prints: the first by name.
  EXPECT_EQ(base_for("RuntimeError: the store's backend is not supported on this platform"),
            "scenarios/issues/process-group-asks-for-nccl-the-build-lacks.yaml");
}

// Two bases of 5.1 / R5.4 that no evidence tells apart: the AutoTP one is DeepSpeed's (its
// workload.versions states DeepSpeed's), the KV-cache one no framework's. An input that names
// Megatron and not DeepSpeed drafts from the latter; one that names DeepSpeed, or none, from the
// first by name.
TEST(TriageDraft, ABaseOfAnotherFrameworkThanTheInputNamesGivesWay) {
  const auto base_for = [](std::vector<std::string> frameworks) {
    std::istringstream in("inference fails when serving the model on 2 GPUs\n");
    Result r = triage(read_input(in, 16u << 20), tables());
    Candidate top;
    top.id = "5.1";
    r.symptoms = {top};
    r.root_causes = {Candidate{"R5.4", 4.0, {}, "", {}}};
    BaseQuery q;
    q.frameworks = std::move(frameworks);
    return choose_base(r, sources(), q)->shown;
  };
  EXPECT_EQ(base_for({}), "scenarios/issues/autotp-finds-no-row-parallel-layer-in-llama.yaml");
  EXPECT_EQ(base_for({"deepspeed"}),
            "scenarios/issues/autotp-finds-no-row-parallel-layer-in-llama.yaml");
  EXPECT_EQ(base_for({"megatron"}),
            "scenarios/issues/generate-calls-keep-the-kv-cache-past-the-context.yaml");
  EXPECT_EQ(base_for({"megatron", "deepspeed"}),
            "scenarios/issues/autotp-finds-no-row-parallel-layer-in-llama.yaml");
}

TEST(TriageDraft, AnExpectationShowsAnEventByItsOracleOrItsPattern) {
  const auto shows = [](const char* expect, const char* event) {
    return expect_shows(YAML::Load(expect), event);
  };
  EXPECT_TRUE(shows("{oracle: oom}", "oom"));
  EXPECT_FALSE(shows("{oracle: checkpoint_error}", "oom"));
  EXPECT_TRUE(shows("{oracle: checkpoint_error}", "disk full"));
  EXPECT_TRUE(shows("{oracle: hang, hang_s: 5}", "comm timeout"));
  EXPECT_TRUE(shows("{oracle: error_signature, pattern: 'missing: rank 3'}", "rank missing"));
  EXPECT_FALSE(shows("{oracle: error_signature, pattern: 'missing: rank 3'}", "comm timeout"));
  EXPECT_TRUE(
      shows("{oracle: any, of: [{oracle: completed}, {oracle: skipped_steps}]}", "loss scale"));
  EXPECT_FALSE(shows("{oracle: oom, absent: true}", "oom"));
  // A pattern's regex syntax is read as the text it matches.
  EXPECT_TRUE(shows("{oracle: error_signature, pattern: 'creat(e|ing) shared memory segment'}",
                    "shm setup"));
  EXPECT_EQ(pattern_text(R"(^creat(?:e|ing) (a|b)\.\d+ x?y \(z\)$)"), "create a. xy (z)");
  EXPECT_EQ(pattern_text(R"(GPT:\n\tsize mismatch)"), "GPT:  size mismatch");
  // The evidence's events, as fl-detect-logs reads its lines.
  Candidate c;
  c.evidence = {{3, "torch.OutOfMemoryError: CUDA out of memory.", "cuda-oom"},
                {5, "Watchdog caught collective operation timeout", "c10d-watchdog-timeout"},
                {7, "CUDA out of memory again", "cuda-oom"}};
  EXPECT_EQ(evidence_events(c), (std::vector<std::string>{"oom", "comm timeout"}));
}

TEST(TriageDraft, NoAnswerMeansNoDraft) {
  const Draft d = draft_of("Fix typo in docs/getting-started.md\n");
  EXPECT_FALSE(d.made);
  EXPECT_EQ(format_draft(d), "Drafted scenario: none (no symptom to draft from)\n");
}

TEST(TriageDraft, WriteRefusesToReplaceAnExistingFileUnlessForced) {
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / ("fl_triage_draft_write." + std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "mine.yaml").string();
  std::ofstream(path) << "name: mine\n";
  EXPECT_EQ(write_draft(path, "name: draft\n", false), path + " exists (--force replaces it)");
  std::ifstream kept(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "name: mine\n");
  EXPECT_EQ(write_draft(path, "name: draft\n", true), "");
  std::ifstream replaced(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(replaced), {}), "name: draft\n");
  const std::string fresh = (dir / "new.yaml").string();
  EXPECT_EQ(write_draft(fresh, "name: draft\n", false), "");
  EXPECT_TRUE(fs::exists(fresh));
}

// Every draft over the tune corpus validating is triage.EvalOnTheTuneSplit's check (run_eval fails
// on a draft that does not validate, and with --min-drafts 95 when fewer answers were drafted);
// this file's test of it repeated that 50-second evaluation (stop 56).

}  // namespace
}  // namespace fl::triage
