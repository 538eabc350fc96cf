// A layout every rank would refuse before step 0 is refused by `validate` and `run` first, from
// the worker's own check (`fl-train --check-layout WORLD`), unless the scenario expects exactly
// that refusal. Uses this build's fl-train and fl-infer.
#include <gtest/gtest.h>

#include <string>

#include "harness/model/scenario.hpp"
#include "harness/run/layout_check.hpp"
#include "harness/run/runner.hpp"
#include "tests/support/scenario_files.hpp"

namespace fl::harness {
namespace {

class LayoutCheck : public fl::test::ScenarioFiles {
 protected:
  LayoutCheck() : ScenarioFiles("layout-check") {}
  Scenario load(const std::string& topology, const std::string& expect,
                const std::string& workload = "{steps: 2}") {
    return load_scenario(write("s.yaml", "name: s\ntopology: " + topology + "\nworkload: " +
                                             workload + "\nexpect: " + expect + "\nseed: 7\n"));
  }
  // check_runnable_here's error for the scenario, "" when it passes.
  static std::string refused(const Scenario& s) {
    try {
      check_runnable_here(s);
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(LayoutCheck, AnAcceptedLayoutPasses) {
  const auto s = load("{ranks: 4, dp: 2, tp: 2}", "{oracle: completed}");
  EXPECT_EQ(layout_refusal(s).message, "");
  EXPECT_EQ(refused(s), "");
}

// The tiny model has 4 heads: tp 3 splits none of them evenly. The error names the file, the
// workers' own words (Megatron's, with the allowed values) and what the scenario expects.
TEST_F(LayoutCheck, HeadsThatTensorParallelismCannotSplitAreRefusedBeforeAnyRankStarts) {
  const auto s = load("{ranks: 3, tp: 3}", "{oracle: completed}");
  EXPECT_EQ(layout_refusal(s).message,
            "num_attention_heads (4) must be a multiple of tensor_model_parallel_size (3). "
            "(invalid layout: topology.tp allowed for 4 heads: 1, 2, 4)");
  const std::string why = refused(s);
  EXPECT_NE(why.find(s.file + ": topology / workload: every rank would stop before step 0"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("allowed for 4 heads: 1, 2, 4"), std::string::npos) << why;
  EXPECT_NE(why.find("this one expects completed"), std::string::npos) << why;
}

// The catalogue's 3.2 scenario keeps ZeRO-2 with pipelines because the refusal is its symptom;
// the same layout expecting a clean run, the refusal's absence or another text is refused.
TEST_F(LayoutCheck, ARefusalIsAllowedOnlyWhereItIsTheExpectation) {
  const std::string topo = "{ranks: 4, pp: 2, zero: 2}";
  const std::string pattern = "pattern: \"ZeRO stage 2 cannot be combined with pipeline\"";
  const auto expected = load(topo, "{symptom: \"3.2\", oracle: error_signature, " + pattern + "}");
  EXPECT_EQ(layout_refusal(expected).klass, "config");
  EXPECT_TRUE(expects_refusal(expected, layout_refusal(expected)));
  EXPECT_EQ(refused(expected), "");

  EXPECT_NE(refused(load(topo, "{oracle: completed}")), "");
  EXPECT_NE(refused(load(topo, "{symptom: \"3.2\", oracle: error_signature, absent: true, " +
                                   pattern + "}")),
            "");
  const std::string other = refused(
      load(topo, "{symptom: \"3.2\", oracle: error_signature, pattern: \"out of memory\"}"));
  EXPECT_NE(other.find("this one expects error_signature"), std::string::npos) << other;
  // An exit_class expectation of an error is met by ranks that stop with status 2.
  EXPECT_EQ(refused(load(topo, "{symptom: \"3.2\", oracle: exit_class, exit_class: error}")), "");
}

// ZeRO partitions over data-parallel ranks: at dp 1 every rank refuses it; the check reads the
// workload's own flags (its shape, workload.args), not only the topology.
TEST_F(LayoutCheck, TheWorkersFlagsAreTheOnesChecked) {
  EXPECT_NE(layout_refusal(load("{ranks: 2, tp: 2, zero: 1}", "{oracle: completed}"))
                .message.find("ZeRO stage 1 partitions across data-parallel ranks, but dp is 1"),
            std::string::npos);
  const auto odd = load("{ranks: 2, tp: 2}", "{oracle: completed}",
                        "{steps: 2, shape: {heads: 3, d_model: 48}}");
  EXPECT_NE(layout_refusal(odd).message.find("num_attention_heads (3)"), std::string::npos)
      << layout_refusal(odd).message;
  const auto args =
      load("{ranks: 2, tp: 2}", "{oracle: completed}", "{steps: 2, args: [\"--tp\", \"1\"]}");
  EXPECT_NE(layout_refusal(args).message.find("dp 1 x tp 1 x pp 1 = 1 ranks, but the world has 2"),
            std::string::npos)
      << layout_refusal(args).message;
}

// fl-train also makes its Trainer's own checks before any allocation, in the order a rank makes
// them: DeepSpeed's batch triangle, the DDP wrapper's layouts, the ZeRO engine's bucket sizes
// against each rank's share of the model.
TEST_F(LayoutCheck, TheTrainersOwnConfigurationChecksAreAskedToo) {
  EXPECT_NE(layout_refusal(load("{ranks: 2, dp: 2}", "{oracle: completed}",
                                "{steps: 2, micro_batch: 4, train_batch_size: 16}"))
                .message.find("train_batch_size is not equal to micro_batch_per_gpu * "
                              "gradient_acc_step * world_size 16 != 4 * 1 * 2"),
            std::string::npos);
  EXPECT_NE(layout_refusal(load("{ranks: 2, tp: 2}", "{oracle: completed}",
                                "{steps: 2, ddp: {wrapper: true}}"))
                .message.find("wraps a model every data-parallel rank holds whole"),
            std::string::npos);
  const WorkerRefusal big =
      layout_refusal(load("{ranks: 2, dp: 2, zero: 1}", "{oracle: completed}",
                          "{steps: 2, zero: {reduce_bucket_size: 1000000000}}"));
  EXPECT_NE(big.message.find("--reduce-bucket-size 1000000000 is larger than the model"),
            std::string::npos)
      << big.message;
}

// A workload.args value the worker's parser refuses stops every rank the same way (before, the
// run said only "ranks 0,1 failed" and its hang oracle "not observed"); a scenario whose
// expectation is that parser's line keeps it.
TEST_F(LayoutCheck, AnArgumentTheWorkersParserRefusesIsRefusedWithItsLine) {
  const auto s = load("{ranks: 2, dp: 2}", "{symptom: \"4.11\", oracle: hang, hang_s: 3}",
                      "{steps: 4, args: [\"--lr\", \"-5\"]}");
  const WorkerRefusal r = layout_refusal(s);
  EXPECT_EQ(r.klass, "");
  EXPECT_EQ(r.message, "--lr: -5 is not allowed (allowed: 0 to 10)");
  const std::string why = refused(s);
  EXPECT_NE(why.find("workload.args: every rank would stop before step 0 with the workers' own "
                     "command-line check: --lr: -5 is not allowed"),
            std::string::npos)
      << why;
  EXPECT_EQ(
      refused(load("{ranks: 2, dp: 2}",
                   "{symptom: \"2.3\", oracle: error_signature, pattern: \"--lr: -5 is not\"}",
                   "{steps: 4, args: [\"--lr\", \"-5\"]}")),
      "");
}

// fl-infer answers the same check for a sharded inference layout.
TEST_F(LayoutCheck, TheInferenceWorkerAnswersToo) {
  EXPECT_EQ(layout_refusal(load("{ranks: 2, tp: 2}", "{oracle: completed}",
                                "{kind: infer, infer: {new_tokens: 4}}"))
                .message,
            "");
  EXPECT_NE(layout_refusal(load("{ranks: 3, tp: 3}", "{oracle: completed}",
                                "{kind: infer, infer: {new_tokens: 4}}"))
                .message.find("must be a multiple of tensor_model_parallel_size (3)"),
            std::string::npos);
}

// An `args` fault changes the ranks' command lines at launch (the heads scenario of
// scenarios/issues/ makes its refusal so, and a fix may clear one so): the run decides.
TEST_F(LayoutCheck, AnArgsFaultLeavesTheQuestionToTheRun) {
  const auto s = load("{ranks: 4, tp: 4, zero: 1}", "{oracle: completed}",
                      "{steps: 2}\nfaults: [{args: [\"--tp\", \"2\", \"--dp\", \"2\"]}]");
  EXPECT_EQ(layout_refusal(s).message, "");
  EXPECT_EQ(refused(s), "");
}

// The question goes before the scenario's own arguments: after a trailing `--` the parser takes
// no option, and the worker would have refused the question itself.
TEST_F(LayoutCheck, ArgumentsEndingWithADoubleDashAreCheckedAsTheRanksGetThem) {
  EXPECT_EQ(layout_refusal(load("{ranks: 2, dp: 2}", "{oracle: completed}",
                                "{steps: 2, args: [\"--lr\", \"0.001\", \"--\"]}"))
                .message,
            "");
}

// A rank given --check-layout would check and exit 0 with no step: the loader refuses it.
TEST_F(LayoutCheck, TheQuestionItselfIsNoWorkloadArgument) {
  try {
    load("{ranks: 2, dp: 2}", "{oracle: completed}",
         "{steps: 2, args: [\"--check-layout\", \"2\"]}");
    ADD_FAILURE() << "loaded";
  } catch (const ScenarioError& e) {
    EXPECT_NE(
        std::string(e.what()).find("workload.args[0]: --check-layout is the harness's question"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fl::harness
