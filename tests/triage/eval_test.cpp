// faultline triage --eval (harness/triage/eval.hpp): what it counts per labelled issue, per stage
// and per kind of report, with the Wilson intervals its table prints.
#include "harness/triage/eval.hpp"
#include "harness/triage/draft_check.hpp"
#include "tests/support/scratch.hpp"
#include "tests/triage/tables.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fl::triage {
namespace {

namespace fs = std::filesystem;

using test::tables;

// Stop 55: which reports quote their failure (an error word on an error line, any case) and which
// only tell it (a traceback's frames, a sentence, settings).
TEST(TriageEval, AnErrorLineQuotesTheFailureAFrameOrASentenceDoesNot) {
  EXPECT_TRUE(
      quotes_error_text({"  File \"train.py\", line 12, in main",
                         "torch.distributed.DistBackendError: NCCL communicator was aborted"}));
  EXPECT_TRUE(quotes_error_text({"node1:123:456 [0] NCCL WARN Call to connect returned ..."}));
  EXPECT_TRUE(quotes_error_text({"Traceback (most recent call last):"}));
  EXPECT_TRUE(quotes_error_text({"the loss becomes NaN after 300 steps"}));
  EXPECT_FALSE(quotes_error_text(
      {"  File \"engine.py\", line 283, in train_batch", "    self._exec_schedule(sched)"}));
  EXPECT_FALSE(quotes_error_text({"The flops profiler reports 13.36 TFLOPS per GPU."}));
  EXPECT_FALSE(quotes_error_text({"Scheduled maintenance: the room changes on Monday."}));
  EXPECT_TRUE(quotes_error_text({"the job hangs at the first all_reduce"}));
  EXPECT_FALSE(quotes_error_text({}));
}

// The eval's per-stage counts follow each issue's labelled stage, and every share carries its
// Wilson 95% interval.
TEST(TriageEval, CountsPerLabelledStageAndGivesIntervals) {
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / ("fl_triage_test_eval." + std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string corpus = (dir / "c.jsonl").string();
  auto issue = [](const std::string& id, const std::string& line, const std::string& symptom,
                  const std::string& cause, int stage) {
    return fmt::format(R"({{"id": "{}", "split": "tune", "error_lines": ["{}"], "env_lines": [], )"
                       R"("symptoms": ["{}"], "root_cause": "{}", "stage": {}}})"
                       "\n",
                       id, line, symptom, cause, stage);
  };
  std::ofstream(corpus) << issue("a#1", "RuntimeError: Address already in use", "2.1",
                                 "Flawed launcher and environment configuration", 2)
                        << issue("a#2", "RuntimeError: Address already in use", "2.2",
                                 "Flawed launcher and environment configuration", 2)
                        << issue("a#3", "Typo in the README: 'recieve' should be 'receive'.",
                                 "none", "none", 0)
                        // Stop 55: declined, but its label is ranked after 'none'.
                        << issue("a#4",
                                 "This reverts the commit that broke the nv-inference tests: the "
                                 "kernel injection policy sets the attribute on the module.",
                                 "5.1", "Faulty inference logic and framework limitation", 5);
  EvalOptions o;
  o.corpus = corpus;
  std::string table;
  const EvalCounts c = evaluate(tables(), o, &table);
  EXPECT_EQ(c.by_stage[2].issues, 2);
  EXPECT_EQ(c.by_stage[2].top1, 1);  // the port conflict is 2.1, not 2.2
  EXPECT_EQ(c.by_stage[2].stage, 2);
  EXPECT_EQ(c.by_stage[0].issues, 1);
  EXPECT_EQ(c.by_stage[0].top1, 1);  // declined
  EXPECT_EQ(c.by_stage[0].none, 1);
  EXPECT_EQ(c.by_stage[4].issues, 0);
  EXPECT_EQ(c.by_stage[5].issues, 1);
  EXPECT_EQ(c.by_stage[5].top1, 0);  // 'none' is its first answer
  EXPECT_EQ(c.by_stage[5].top3, 1);  // 5.1 ranks after it
  EXPECT_EQ(c.top3_after_none, 1);
  EXPECT_EQ(c.quoting, 2);  // the two "Address already in use" lines
  EXPECT_EQ(c.quoting_top1, 1);
  EXPECT_EQ(c.quoting_top3, 2);
  EXPECT_NE(table.find("| issues with an error word in their error lines: top-1 | 50.0% (1/2)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| the others (no error word in their error lines): top-3 | 100.0% (2/2)"),
            std::string::npos)
      << table;
  EXPECT_EQ(c.by_stage[5].none, 1);
  EXPECT_NE(table.find("| top-1 symptom | 50.0% (2/4) [15-85] |"), std::string::npos) << table;
  EXPECT_NE(table.find("| top-3 symptom | 100.0% (4/4)"), std::string::npos) << table;
  fs::remove_all(dir);
}

// Stop 74: a repro that SIGINT or SIGTERM ended stops the eval's repros (a user's Ctrl-C used to
// end one run and the eval went on to the next draft); the shares count the finished ones.
TEST(TriageEval, AnInterruptedReproStartsNoOtherAndTheEvalSaysSo) {
  const fs::path dir = ::fl::test::removed_at_exit(
      fs::temp_directory_path() / ("fl_triage_test_eval_int." + std::to_string(::getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string corpus = (dir / "c.jsonl").string();
  std::ofstream out(corpus);
  for (int i = 0; i < 4; ++i) {
    out << fmt::format(
        R"({{"id": "a#{}", "split": "tune", "error_lines": )"
        R"(["RuntimeError: The server socket has failed to listen on any local )"
        R"(network address. port: 29500, useIPv6: 0, code: -98, name: EADDRINUSE, )"
        R"(message: address already in use"], "env_lines": [], "symptoms": ["2.1"], )"
        R"("root_cause": "Flawed launcher and environment configuration", )"
        R"("stage": 2}})"
        "\n",
        i);
  }
  out.close();
  int calls = 0;
  for (const int interrupt_at : {0, 2}) {
    calls = 0;
    EvalOptions o;
    o.corpus = corpus;
    o.validate = harness_validator();
    o.repro_max = 10;
    o.repro = [&](const std::string&, bool) {
      ReproOutcome r;
      r.interrupted = calls == interrupt_at;
      r.reproduced = r.verified = !r.interrupted;
      r.exit_code = r.interrupted ? 4 : 0;
      ++calls;
      return r;
    };
    std::string table;
    const EvalCounts c = evaluate(tables(), o, &table);
    EXPECT_TRUE(c.repro_interrupted);
    EXPECT_EQ(calls, interrupt_at + 1);  // none after the interrupted one
    EXPECT_EQ(c.repro_runs, interrupt_at);
    EXPECT_EQ(c.reproduced, interrupt_at);
    EXPECT_NE(table.find(fmt::format("repro interrupted (SIGINT/SIGTERM) after {} finished",
                                     interrupt_at)),
              std::string::npos)
        << table;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::triage
