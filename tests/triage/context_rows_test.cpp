// Context rows (harness/triage/context_rows.hpp, `context_for:` in a signature table): a row whose
// own line is context only and that re-reads a stage-neutral error row matched on another line.
// The mechanism on a scratch table (it fires only across two lines, cites both, and the loader is
// strict about what it lists), then the shipped tables: an out-of-memory with DeepSpeed's inference
// engine named on another line is stage 5's 5.2, not the training step's 4.2.
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

using test::cites;
using test::tables;

// A scratch signature folder holding one file `body`.
std::string write_table(const std::string& name, const std::string& body) {
  return test::write_scratch_table("fl_triage_context_rows_", name, body);
}

std::string load_error(const std::string& dir) {
  try {
    load_tables(dir, default_taxonomy_path(), "none");
  } catch (const SignatureError& e) {
    return e.what();
  }
  return "(loaded)";
}

// An error row that names a training symptom, and a context row that re-reads it as serving.
const char* const kTable =
    "signatures:\n"
    "  - {id: boom, needle: boom, regex: 'boom!', symptoms: {\"4.3\": 3}}\n"
    "  - id: serving-boom\n"
    "    needle: serving\n"
    "    regex: 'serving engine'\n"
    "    context_for: [boom]\n"
    "    symptoms: {\"5.1\": 4}\n"
    "    root_cause: {\"R5.2\": 1}\n";

Result run_on(const Tables& t, const std::string& text) {
  std::istringstream in(text);
  return triage(read_input(in, 1u << 20), t);
}

TEST(TriageContextRows, AnErrorWithItsContextOnAnotherLineTakesTheContextsSymptomAndCitesBoth) {
  const auto t = load_tables(write_table("across", kTable), default_taxonomy_path(), "none");
  const auto r = run_on(t, "the serving engine starts\nsome log line\nboom! it fell over\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  ASSERT_GE(r.symptoms.size(), 2u);
  EXPECT_EQ(r.symptoms.at(0).id, "5.1");
  EXPECT_DOUBLE_EQ(r.symptoms.at(0).score, 5.0);  // 4 x 1.25: the row's two lines
  EXPECT_TRUE(cites(r.symptoms.at(0), "serving-boom", 1));
  EXPECT_TRUE(cites(r.symptoms.at(0), "boom", 3));
  EXPECT_EQ(r.symptoms.at(1).id, "4.3");
  EXPECT_EQ(r.stage, 5);
  const std::string shown = format_result(r, t);
  EXPECT_NE(shown.find("line 1 [serving-boom]: the serving engine starts"), std::string::npos)
      << shown;
  EXPECT_NE(shown.find("line 3 [boom]: boom! it fell over"), std::string::npos) << shown;
}

TEST(TriageContextRows, TheContextAloneOrOnTheErrorsOwnLineCountsForNothing) {
  const auto t = load_tables(write_table("alone", kTable), default_taxonomy_path(), "none");
  const auto context_only = run_on(t, "the serving engine starts\nall is well\n");
  EXPECT_EQ(context_only.kind, Result::Kind::kNone);
  EXPECT_TRUE(context_only.symptoms.empty());  // not even a weak match
  const auto same_line = run_on(t, "the serving engine said boom! and stopped\n");
  ASSERT_EQ(same_line.kind, Result::Kind::kFound);
  ASSERT_EQ(same_line.symptoms.size(), 1u);  // the one-line rows read that line
  EXPECT_EQ(same_line.symptoms.at(0).id, "4.3");
  const auto error_only = run_on(t, "boom! it fell over\n");
  ASSERT_EQ(error_only.kind, Result::Kind::kFound);
  EXPECT_EQ(error_only.symptoms.at(0).id, "4.3");
}

TEST(TriageContextRows, TheLoaderRejectsAnUnknownIdAContextOfAContextAndANonList) {
  const std::string unknown =
      load_error(write_table("unknown",
                             "signatures:\n"
                             "  - {id: ctx, needle: ab, regex: ab, context_for: [nosuch], "
                             "symptoms: {\"5.1\": 1}}\n"));
  EXPECT_NE(unknown.find("signature 'ctx': context_for: 'nosuch' is not a signature id"),
            std::string::npos)
      << unknown;
  const std::string nested = load_error(write_table(
      "nested",
      "signatures:\n"
      "  - {id: err, needle: ab, regex: ab, symptoms: {\"4.3\": 1}}\n"
      "  - {id: c1, needle: cd, regex: cd, context_for: [err], symptoms: {\"5.1\": 1}}\n"
      "  - {id: c2, needle: ef, regex: ef, context_for: [c1], symptoms: {\"5.1\": 1}}\n"));
  EXPECT_NE(nested.find("signature 'c2': context_for: 'c1' is itself a context row"),
            std::string::npos)
      << nested;
  const std::string scalar = load_error(write_table(
      "scalar",
      "signatures:\n"
      "  - {id: err, needle: ab, regex: ab, symptoms: {\"4.3\": 1}}\n"
      "  - {id: c1, needle: cd, regex: cd, context_for: err, symptoms: {\"5.1\": 1}}\n"));
  EXPECT_NE(scalar.find("t.yaml:3:"), std::string::npos) << scalar;
  EXPECT_NE(scalar.find("context_for: must list the ids of one or more error rows"),
            std::string::npos)
      << scalar;
  EXPECT_EQ(load_error(write_table("fine", kTable)), "(loaded)");
}

// The shipped tables: DeepSpeed's init_inference on one line and torch's CUDA OOM on another
// (how DeepSpeed's inference threads quote them, the call in the script and the error in the
// traceback) is an inference memory issue; the same OOM without it stays the training step's.
TEST(TriageContextRows, AnInferenceOutOfMemoryAcrossLinesIsStageFive) {
  const std::string oom =
      "RuntimeError: CUDA out of memory. Tried to allocate 192.00 MiB (GPU 0; 14.56 GiB total "
      "capacity; 13.52 GiB already allocated; 40.00 MiB free)\n";
  const std::string text =
      "model = deepspeed.init_inference(model, dtype=torch.half)\n"
      "Traceback (most recent call last):\n" +
      oom;
  std::istringstream in(text);
  const auto r = triage(read_input(in, 1u << 20), tables());
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.at(0).id, "5.2");
  EXPECT_TRUE(cites(r.symptoms.at(0), "cuda-oom", 3));
  ASSERT_FALSE(r.root_causes.empty());
  EXPECT_EQ(r.root_causes.at(0).id, "R5.1");
  EXPECT_TRUE(cites(r.root_causes.at(0), "inference-context-oom", 1));
  EXPECT_TRUE(cites(r.root_causes.at(0), "cuda-oom", 3));

  std::istringstream training("Traceback (most recent call last):\n" + oom);
  const auto t = triage(read_input(training, 1u << 20), tables());
  ASSERT_EQ(t.kind, Result::Kind::kFound);
  EXPECT_EQ(t.symptoms.at(0).id, "4.2");
}

// A shape error under init_inference's mp_size (DeepSpeed's tensor-parallel inference splits
// the heads over the ranks) is stage 5's tensor mismatch; an illegal memory access with kernel
// injection switched on in the script is an inference execution failure. Each cites both lines.
TEST(TriageContextRows, AShapeErrorOrAnIllegalAccessUnderInferenceSettingsIsStageFive) {
  const std::string shape =
      "model = deepspeed.init_inference(model,\n"
      "    mp_size=8,\n"
      "    dtype=torch.half)\n"
      "RuntimeError: The size of tensor a (384) must match the size of tensor b (256) at "
      "non-singleton dimension 3\n";
  std::istringstream in(shape);
  const auto r = triage(read_input(in, 1u << 20), tables());
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.at(0).id, "5.8");
  EXPECT_TRUE(cites(r.symptoms.at(0), "mp-size-context-shape", 2));
  EXPECT_TRUE(cites(r.symptoms.at(0), "tensor-shape-mismatch-family", 4));

  const std::string access =
      "pipe.model = deepspeed.init_inference(pipe.model, replace_with_kernel_inject=True,\n"
      "    dtype=torch.int8)\n"
      "RuntimeError: CUDA error: an illegal memory access was encountered\n";
  std::istringstream in2(access);
  const auto a = triage(read_input(in2, 1u << 20), tables());
  ASSERT_EQ(a.kind, Result::Kind::kFound);
  EXPECT_EQ(a.stage, 5);
  ASSERT_FALSE(a.symptoms.empty());
  EXPECT_EQ(a.symptoms.at(0).id, "5.1");
  EXPECT_TRUE(cites(a.symptoms.at(0), "illegal-memory-access", 3));
  ASSERT_FALSE(a.root_causes.empty());
  EXPECT_EQ(a.root_causes.at(0).id, "R5.2");
}

// Stop 49 (round 4): the scripts inference runs with name it too. A checkpoint's size mismatch
// under an *infer*.py script is the inference load (5.5, the corpus convention for loading a
// checkpoint for inference); a shape error under DeepSpeedExamples' --use_kernel and
// --use_meta_tensor flags is tensor-parallel inference's 5.8. Without the script line the size
// mismatch stays preparation's 3.1.
TEST(TriageContextRows, ALoadOrShapeErrorUnderAnInferenceScriptIsStageFive) {
  const std::string mismatch =
      "size mismatch for lm_head.weight: copying a param with shape torch.Size([50257, 768]) "
      "from checkpoint, the shape in current model is torch.Size([250880, 1024]).\n";
  std::istringstream in("python inference.py --model bloom --pretrain actor.pt\n" + mismatch);
  const auto r = triage(read_input(in, 1u << 20), tables());
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 5);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.at(0).id, "5.5");
  EXPECT_TRUE(cites(r.symptoms.at(0), "inference-script-context-load", 1));
  EXPECT_TRUE(cites(r.symptoms.at(0), "size-mismatch", 2));

  std::istringstream alone(mismatch);
  const auto p = triage(read_input(alone, 1u << 20), tables());
  ASSERT_EQ(p.kind, Result::Kind::kFound);
  EXPECT_EQ(p.stage, 3);

  const std::string shape =
      "deepspeed --num_gpus 2 run_model.py --name EleutherAI/gpt-j-6b --use_kernel "
      "--use_meta_tensor\n"
      "RuntimeError: shape '[1, 9, 16, 256]' is invalid for input of size 18432\n";
  std::istringstream in2(shape);
  const auto s = triage(read_input(in2, 1u << 20), tables());
  ASSERT_EQ(s.kind, Result::Kind::kFound);
  EXPECT_EQ(s.stage, 5);
  ASSERT_FALSE(s.symptoms.empty());
  EXPECT_EQ(s.symptoms.at(0).id, "5.8");
  EXPECT_TRUE(cites(s.symptoms.at(0), "inference-flags-context-shape", 1));
  EXPECT_TRUE(cites(s.symptoms.at(0), "shape-mismatch", 2));
}

// Stage 3: an illegal memory access raised while deepspeed.initialize configures the optimizer is
// a runtime error of preparation (3.5), and a watchdog timeout while Megatron-LM builds its
// datasets is the data preparation (3.1), not the training loop's 4.3 and 4.11.
TEST(TriageContextRows, ErrorsDuringEngineOrDataSetUpAreStageThree) {
  const std::string setup =
      "  File \"deepspeed/runtime/engine.py\", line 1095, in __init__\n"
      "    self._configure_optimizer(optimizer, model_parameters)\n"
      "  File \"apex/multi_tensor_apply/multi_tensor_apply.py\", line 30, in __call__\n"
      "RuntimeError: CUDA error: an illegal memory access was encountered\n";
  std::istringstream in(setup);
  const auto r = triage(read_input(in, 1u << 20), tables());
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  EXPECT_EQ(r.stage, 3);
  ASSERT_FALSE(r.symptoms.empty());
  EXPECT_EQ(r.symptoms.at(0).id, "3.5");
  EXPECT_TRUE(cites(r.symptoms.at(0), "illegal-memory-access", 4));

  const std::string data =
      "    train_data_iterator, valid_data_iterator, test_data_iterator = "
      "build_train_valid_test_data_iterators(\n"
      "[E ProcessGroupNCCL.cpp:737] [Rank 7] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=749, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800258 milliseconds "
      "before timing out.\n";
  std::istringstream in2(data);
  const auto d = triage(read_input(in2, 1u << 20), tables());
  ASSERT_EQ(d.kind, Result::Kind::kFound);
  EXPECT_EQ(d.stage, 3);
  ASSERT_FALSE(d.symptoms.empty());
  EXPECT_EQ(d.symptoms.at(0).id, "3.1");
  EXPECT_TRUE(cites(d.symptoms.at(0), "c10d-watchdog-timeout", 2));
}

}  // namespace
}  // namespace fl::triage
