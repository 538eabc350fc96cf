// Stop 49 round 5: the right symptom within stages 4 and 5 when the stage is already right. Each
// case is a text in the shape the frameworks print or reporters write it; with the tables and
// cues of main before this change each ranked another symptom of the same stage first.
#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace fl::triage {
namespace {

using test::cites;
using test::tables;

using test::run;

// Gradients whose synchronisation does not finish (Colossal-AI's ZeroDDP/GeminiDDP words, or a
// reporter's) are a wrong training computation, 4.4 (main's tables found nothing here).
TEST(TriageStage4SymptomWithinStage, GradientSynchronisationThatDoesNotFinishIsFourFour) {
  const auto r = run(
      "After backward on 8 GPUs the synchronization of gradients does not finish for the expert "
      "layers.\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "4.4");
  EXPECT_TRUE(cites(r.symptoms[0], "grads-not-synchronised-statement", 1));
}

// A loss that stays flat is 4.1 by the corpus's convention; the ranker's 4.1 words now include
// "not decreas" (main put 4.2 first, from "zero stage 2" and the stage's priors).
TEST(TriageStage4SymptomWithinStage, AFlatLossInWordsIsFourOne) {
  const auto r =
      run("deepspeed zero stage 2 training on 8 GPUs: the train loss value is not decreasing after "
          "the first epoch, the accuracy stays at 10%\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "4.1");
}

// DeepSpeed's SDLoaderFactory.get_sd_loader_json reads data['checkpoints'] from init_inference's
// `checkpoint=` description: a KeyError there is the engine unable to load its checkpoint (5.5),
// also beside kernel injection, which alone ranks 5.3 first (main answered 5.3 on context).
TEST(TriageStage5SymptomWithinStage, TheCheckpointDescriptionsKeyErrorIsALoadingIssue) {
  const auto r = run("KeyError: 'checkpoints'\nreplace_with_kernel_inject=True\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "5.5");
  EXPECT_TRUE(cites(r.symptoms[0], "ds-inference-checkpoint-json", 1));
  // The frame that raises it reads the same, and kernel injection alone stays 5.3.
  const auto frame = run("    ckpt_list = data['checkpoints']\n");
  ASSERT_EQ(frame.kind, Result::Kind::kFound);
  ASSERT_FALSE(frame.symptoms.empty());
  EXPECT_EQ(frame.symptoms[0].id, "5.5");
  const auto inject = run("replace_with_kernel_inject=True\n");
  ASSERT_EQ(inject.kind, Result::Kind::kFound);
  ASSERT_FALSE(inject.symptoms.empty());
  EXPECT_EQ(inject.symptoms[0].id, "5.3");
}

// Stop 79: torch's meta-tensor copy error in a report that names DeepSpeed's inference on another
// line is a module init_inference's loaders never filled (5.5 / R5.6,
// workloads/infer/meta_load.hpp); alone it stays stage 3's loading failure (3.1).
TEST(TriageStage5SymptomWithinStage, AMetaTensorCopyBesideInferenceIsALoadingIssue) {
  const auto r =
      run("NotImplementedError: Cannot copy out of meta tensor; no data!\n"
          "deepspeed --num_gpus 8 inference-test.py --name facebook/opt-66b --use_meta_tensor\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms[0].id, "5.5");
  EXPECT_TRUE(cites(r.symptoms[0], "meta-tensor", 1));
  ASSERT_FALSE(r.root_causes.empty());
  EXPECT_EQ(r.root_causes[0].id, "R5.6");
  const auto alone = run("NotImplementedError: Cannot copy out of meta tensor; no data!\n");
  ASSERT_EQ(alone.kind, Result::Kind::kFound);
  ASSERT_FALSE(alone.symptoms.empty());
  EXPECT_EQ(alone.symptoms[0].id, "3.1");
}

// Stop 80: the optimizer wrapper deepspeed.initialize chose against what the pipeline engine
// calls (4.12), and its sanity check on data types at initialize (3.2), each by DeepSpeed's own
// words.
TEST(TriageStage4SymptomWithinStage, TheWrapperAPipelineCannotUseIsAnIncompatibility) {
  const auto r =
      run("  File \"deepspeed/runtime/pipe/engine.py\", line 768, in _exec_backward_pass\n"
          "    self.optimizer.clear_lp_grads()\n"
          "AttributeError: 'DeepSpeedZeroOptimizer' object has no attribute 'clear_lp_grads'\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 4);
  ASSERT_GE(r.symptoms.size(), 2u);
  EXPECT_EQ(r.symptoms[0].id, "4.12");
  EXPECT_TRUE(cites(r.symptoms[0], "ds-pipeline-clear-lp-grads", 3));
  const auto reduce =
      run("    assert self.zero_optimization_stage() == 1, \"only bf16 + z1 are "
          "supported\"\nNotImplementedError\n");
  ASSERT_EQ(reduce.kind, Result::Kind::kFound);
  ASSERT_FALSE(reduce.symptoms.empty());
  EXPECT_EQ(reduce.symptoms[0].id, "4.12");
  const auto init =
      run("NotImplementedError: Model data type and gradient accumulation data type must be equal "
          "to use ZeRO\n");
  ASSERT_EQ(init.kind, Result::Kind::kFound);
  EXPECT_EQ(init.stage, 3);
  ASSERT_FALSE(init.symptoms.empty());
  EXPECT_EQ(init.symptoms[0].id, "3.2");
  ASSERT_FALSE(init.root_causes.empty());
  EXPECT_EQ(init.root_causes[0].id, "R3.4");
}

// Stop 82: checkpoint texts whose symptom is the stage's checkpoint symptom: a training run's save
// or resume (4.10), a generation tool's load (5.5). Each names the row that must be cited.
const test::SignatureCase kCheckpointTexts[] = {
    // A run's checkpoint saved or resumed (stop 82): Colossal-AI's GeminiDDP assertion as it
    // printed (its message lacked the f-prefix), torch's Optimizer.load_state_dict refusal and
    // Megatron-LM's resume under another tensor/pipeline layout.
    {"GeminiMissingAParameterOfTheStateDictIsACheckpointFailure",
     "AssertionError: can not find parameter `{full_param_name}` in the GeminiDDP module\n", 4,
     "4.10", "R4.2", "gemini-param-not-in-state-dict"},
    {"AnOptimizerStateWithOtherGroupsIsACheckpointFailure",
     "ValueError: loaded state dict contains a parameter group that doesn't match the size of "
     "optimizer's group\n",
     4, "4.10", "", "optimizer-group-size-mismatch"},
    {"ResumingUnderAnotherTpPpLayoutIsACheckpointFailure",
     "(TP, PP) mismatch after resume ((1, 4) vs (2, 2) from checkpoint): RNG state will be "
     "ignored\n",
     4, "4.10", "R4.8", "megatron-tp-pp-mismatch-after-resume"},
    // Megatron-LM's generation tools loading a checkpoint whose shapes do not fit the model they
    // built (stop 82): the inference load, 5.5, not preparation's 3.1. The size-mismatch text is
    // quoted without its "size mismatch for NAME:" head, as reporters paste it.
    {"AGenerationServersCheckpointOfOtherShapesIsAModelLoadingIssue",
     "python tools/run_text_generation_server.py --tensor-model-parallel-size 1 --load ckpt\n"
     "copying a param with shape torch.Size([40064, 2560]) from checkpoint, the shape in current "
     "model is torch.Size([50304, 2560])\n",
     5, "5.5", "R5.6", "megatron-generation-context-load"},
    {"AGenerationScriptsCheckpointLoadFrameIsAModelLoadingIssue",
     "  File \"tools/generate_samples_gpt.py\", line 94, in main\n"
     "    _ = load_checkpoint(model, None, None)\n",
     5, "5.5", "R5.6", "megatron-generation-context-load"},
};

class CheckpointText : public ::testing::TestWithParam<test::SignatureCase> {};

TEST_P(CheckpointText, RanksItsSymptomFirst) {
  test::expect_ranked_first(run(GetParam().text), GetParam());
}

INSTANTIATE_TEST_SUITE_P(TriageCheckpointTexts, CheckpointText,
                         ::testing::ValuesIn(kCheckpointTexts), test::case_name);

}  // namespace
}  // namespace fl::triage
