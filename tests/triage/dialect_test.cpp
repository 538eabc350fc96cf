// faultline triage's catalogue dialect and --json: the copies in harness/triage/dialect.cpp are
// the detector's table and what a failing worker prints (checked against the real code, so they
// cannot drift); a report names, under each candidate faultline produces, the fl-detect-logs
// signature of its evidence and the lines faultline's runs print for it; --json round-trips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>

#include "base/error.hpp"
#include "harness/detectors/logs_signatures.hpp"
#include "harness/triage/dialect.hpp"
#include "harness/triage/draft.hpp"
#include "harness/triage/draft_base.hpp"
#include "harness/triage/report_json.hpp"
#include "harness/triage/triage.hpp"
#include "injector/site.hpp"
#include "kernels/loss_scaler.hpp"
#include "kernels/memory.hpp"
#include "kernels/plugin.hpp"
#include "tests/triage/tables.hpp"
#include "workloads/comm/errors.hpp"
#include "workloads/comm/log_dialect.hpp"
#include "workloads/comm/worker_errors.hpp"
#include "workloads/infer/engine.hpp"
#include "workloads/rendezvous/artifacts.hpp"
#include "workloads/rendezvous/store_client.hpp"
#include "workloads/rendezvous/store_server.hpp"
#include "workloads/rendezvous/world_check.hpp"

namespace fl::triage {
namespace {

using test::tables;

std::string str(const char* s) {
  return s ? s : "";
}

TEST(TriageDialect, TheLogsSignatureCopyIsTheDetectorsTable) {
  const auto& real = detect::logs::signatures();
  const auto& copy = dialect::logs_signatures();
  ASSERT_EQ(copy.size(), real.size());
  for (size_t i = 0; i < real.size(); ++i) {
    EXPECT_EQ(str(copy[i].name), str(real[i].name)) << i;
    EXPECT_EQ(str(copy[i].pattern), str(real[i].pattern)) << real[i].name;
    EXPECT_EQ(str(copy[i].train), str(real[i].train)) << real[i].name;
    EXPECT_EQ(str(copy[i].serve), str(real[i].serve)) << real[i].name;
    EXPECT_EQ(str(copy[i].train_before_first_step), str(real[i].train_before_first_step))
        << real[i].name;
  }
}

// The exception the workloads raise for each example's event, with the example's message.
std::function<int()> thrower(const dialect::Example& e) {
  const std::string sig = e.signature, msg = e.message;
  return [sig, msg]() -> int {
    if (sig == "comm timeout")
      throw comm::CommTimeoutError(msg, "/tmp/faultline",
                                   {202, "ALLREDUCE", 1536, 1536, 2000, 2003});
    if (sig == "oom") throw OutOfMemoryError(msg, 20u << 20, 100u << 20, 110u << 20);
    if (sig == "address in use") throw rdzv::BindError(msg);
    if (sig == "store unreachable") throw rdzv::StoreError(rdzv::StoreErrorKind::kRefused, msg);
    if (sig == "rank missing")
      throw rdzv::WorldCheckError(rdzv::WorldCheckFailure::kMissingRanks, msg);
    if (sig == "loss scale") throw LossScaleError(msg);
    if (sig == "size mismatch") throw CheckpointError(msg);
    if (sig == "build failed" || sig == "import failed" || sig == "no kernel image")
      throw ops::PluginError(msg);
    if (sig == "fetch failed") throw rdzv::ArtifactError(msg);
    if (sig == "world mismatch")
      throw rdzv::WorldCheckError(rdzv::WorldCheckFailure::kWorldSizeMismatch, msg);
    if (sig == "layout too large" || sig == "zero + pp") throw ConfigError(msg);
    if (sig == "device ordinal") throw DeviceError(msg);
    if (sig == "token out of vocab" || sig == "replicas differ" || sig == "kernel tail")
      throw Error(msg);  // raise() without a class
    if (sig == "tp diverge") throw infer::OutputMismatchError(msg);
    if (sig == "collective mismatch") throw comm::CommMismatchError(msg);
    if (sig == "shm setup") throw comm::CommError(msg);
    if (sig == "format version" || sig == "other layout" || sig == "missing shard" ||
        sig == "corrupt shard" || sig == "disk full")
      throw CheckpointError(msg);
    throw std::logic_error("dialect_test has no exception for example '" + sig + "'");
  };
}

// What a failing worker prints to stderr in `fidelity`, a NCCL WARN line's HOST:PID:TID masked.
std::string printed(const dialect::Example& e, const char* fidelity) {
  comm::kLogFidelity.set(fidelity);
  fault::set_rank(0);
  testing::internal::CaptureStderr();
  comm::run_worker_main(thrower(e));
  std::string err = testing::internal::GetCapturedStderr();
  comm::kLogFidelity.reset();
  static const std::regex host(R"((^|\n)\S+:[0-9]+:[0-9]+ (\[[0-9]+\] \S+ NCCL WARN))");
  return std::regex_replace(err, host, "$1HOST:PID:TID $2");
}

TEST(TriageDialect, EveryExampleIsWhatAFailingWorkerPrintsInBothDialects) {
  ASSERT_GE(dialect::examples().size(), 8u);
  for (const auto& e : dialect::examples()) {
    if (e.kind == nullptr) continue;  // not a worker's fatal error (its format is checked below)
    EXPECT_EQ(printed(e, "faultline"), dialect::faultline_line(e) + "\n") << e.signature;
    std::string want;
    for (const char* l : e.pytorch) want += std::string(l) + "\n";
    if (e.pytorch.empty()) want = dialect::faultline_line(e) + "\n";
    EXPECT_EQ(printed(e, "pytorch"), want) << e.signature;
  }
}

TEST(TriageDialect, EveryExampleIsReadByItsLogsSignatureInBothDialects) {
  for (const auto& e : dialect::examples()) {
    const auto* s = detect::logs::classify(dialect::faultline_line(e));
    ASSERT_NE(s, nullptr) << dialect::faultline_line(e);
    EXPECT_STREQ(s->name, e.signature) << dialect::faultline_line(e);
    bool read = e.pytorch.empty();
    for (const char* l : e.pytorch) {
      const auto* p = detect::logs::classify(l);
      read = read || (p && std::string(p->name) == e.signature);
    }
    EXPECT_TRUE(read) << e.signature << ": no pytorch line is read by it";
  }
}

// Every fl-detect-logs signature is either an event faultline prints (an example) or one it has no
// producer of, never both, never neither.
TEST(TriageDialect, EveryLogsSignatureHasAnExampleOrSaysItHasNoProducer) {
  for (const auto& s : detect::logs::signatures()) {
    int n = 0;
    for (const auto& e : dialect::examples()) n += std::string(e.signature) == s.name;
    for (const auto& p : dialect::no_producer()) n += std::string(p.signature) == s.name;
    EXPECT_EQ(n, 1) << s.name;
  }
}

// A C++ file's string literals, adjacent ones joined ("a" "b" -> "ab"; escapes kept as written,
// as in the table's copies, except \" and \\).
std::vector<std::string> joined_literals(const std::string& path) {
  std::ifstream in(path);
  const std::string src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  bool joining = false;
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
      i = src.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (c == '\'') {  // a character literal: '"' must not open a string
      i = src.find('\'', i + (src[i + 1] == '\\' ? 3 : 2));
      joining = false;
      continue;
    }
    if (c != '"') {
      if (!std::isspace(static_cast<unsigned char>(c))) joining = false;
      continue;
    }
    std::string lit;
    for (++i; i < src.size() && src[i] != '"'; ++i) {
      if (src[i] == '\\' && (src[i + 1] == '"' || src[i + 1] == '\\')) ++i;
      lit += src[i];
    }
    if (joining) {
      out.back() += lit;
    } else {
      out.push_back(lit);
    }
    joining = true;
  }
  return out;
}

// A fmt format string as a regex over what it prints: each {...} field any text.
std::string format_regex(const std::string& f) {
  static const std::regex special(R"([.^$|()\[\]*+?\\/])");
  std::string esc = std::regex_replace(f, special, "\\$&");
  return std::regex_replace(esc, std::regex(R"(\{[^}]*\})"), ".*");
}

// Each example names its producer: the format string is in that source file, and the example's
// message is what the format prints (it starts so).
TEST(TriageDialect, EveryExampleMessageIsItsProducersFormat) {
  for (const auto& e : dialect::examples()) {
    ASSERT_NE(e.source, nullptr) << e.signature;
    ASSERT_NE(e.format, nullptr) << e.signature;
    const auto lits = joined_literals(std::string(FAULTLINE_SOURCE_DIR) + "/" + e.source);
    ASSERT_FALSE(lits.empty()) << e.source;
    const bool found = std::any_of(lits.begin(), lits.end(), [&](const std::string& l) {
      return l.find(e.format) != std::string::npos;
    });
    EXPECT_TRUE(found) << e.signature << ": " << e.source << " has no literal '" << e.format << "'";
    EXPECT_TRUE(std::regex_search(e.message, std::regex("^" + format_regex(e.format))))
        << e.signature << ": '" << e.message << "' is not what '" << e.format << "' prints";
  }
}

// The examples' messages are the workloads' own wording: the allocator's OOM sentence and the
// loss scaler's exception text, produced by the real code.
TEST(TriageDialect, ExampleMessagesAreTheWorkloadsOwnSentences) {
  const auto find = [](const std::string& sig) {
    for (const auto& e : dialect::examples())
      if (sig == e.signature) return std::string(e.message);
    return std::string();
  };
  MemoryAccountant acct(110u << 20, 0, Device::cuda(0));
  acct.reserve(100u << 20, "w");
  try {
    acct.reserve(20u << 20, "act.h");
    ADD_FAILURE() << "no OOM";
  } catch (const OutOfMemoryError& oom) {
    EXPECT_EQ(find("oom"), oom.what());
  }
  EXPECT_EQ(find("loss scale").rfind(kLossScaleAtMinimum, 0), 0u);
}

Result annotated(const std::string& text) {
  std::istringstream in(text);
  auto r = triage(read_input(in, 16u << 20), tables());
  static const auto refs = dialect::load_scenario_refs(default_scenario_dirs());
  dialect::annotate(r, refs);
  return r;
}

// The first candidate faultline produces, for a line of a real report's shape.
const Candidate* produced(const Result& r) {
  for (const auto& c : r.symptoms)
    if (!c.faultline.empty()) return &c;
  return nullptr;
}

struct Case {
  const char* text;
  const char* signature;
  const char* symptom;  // the candidate that carries it
};

TEST(TriageDialect, RealErrorLinesGetTheirLogsSignatureAndFaultlinesLines) {
  const Case cases[] = {
      {"[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum=5117, OpType=_ALLGATHER_BASE, NumelIn=4194304, "
       "NumelOut=33554432, Timeout(ms)=1800000) ran for 1800412 milliseconds before timing out.",
       "comm timeout", "4.11"},
      {"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total "
       "capacity of 79.15 GiB of which 1.05 GiB is free.",
       "oom", "4.2"},
      {"RuntimeError: The server socket has failed to listen on any local network address. The "
       "server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
       "address in use", "2.1"},
      {"RuntimeError: Error building extension 'fused_adam'", "build failed", "1.1"},
  };
  for (const auto& c : cases) {
    const auto r = annotated(std::string("deepspeed --num_gpus 8 train.py\n") + c.text + "\n");
    ASSERT_EQ(r.kind, Result::Kind::kFound) << c.text;
    const Candidate* got = produced(r);
    ASSERT_NE(got, nullptr) << c.text;
    EXPECT_EQ(got->id, c.symptom) << c.text;
    ASSERT_FALSE(got->faultline.matches.empty());
    const auto& m = got->faultline.matches.front();
    EXPECT_EQ(m.signature, c.signature) << c.text;
    EXPECT_EQ(m.line, 2u);
    // The real detector reads the issue's line and both of faultline's lines alike.
    for (const std::string& l : {std::string(c.text), m.faultline, m.pytorch}) {
      const auto* s = detect::logs::classify(l);
      ASSERT_NE(s, nullptr) << l;
      EXPECT_EQ(s->name, m.signature) << l;
    }
    EXPECT_NE(m.pytorch, m.faultline) << c.text;
    EXPECT_FALSE(got->faultline.scenarios.empty());
    EXPECT_LE(got->faultline.scenarios.size(), 3u);
    const std::string report = format_result(r, tables());
    EXPECT_NE(report.find("       faultline: scenarios "), std::string::npos) << report;
    EXPECT_NE(report.find("is fl-detect-logs signature '" + m.signature + "'"), std::string::npos)
        << report;
    EXPECT_NE(report.find("         (workload.fidelity: pytorch) "), std::string::npos) << report;
  }
}

TEST(TriageDialect, TheWatchdogCandidatesNameTheScenariosThatExpectThem) {
  const auto r = annotated(
      "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
      "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n");
  for (const auto& c : r.symptoms) {
    if (c.id != "4.7") continue;
    ASSERT_FALSE(c.faultline.empty());
    const auto& s = c.faultline.scenarios;
    EXPECT_NE(std::find(s.begin(), s.end(), "4.7-link-cut-mid-run"), s.end());
    return;
  }
  FAIL() << "no 4.7 candidate";
}

TEST(TriageDialect, ACandidateWhoseTextFaultlineDoesNotPrintGetsNoFaultlineLine) {
  // A CUDA illegal memory access: no fl-detect-logs signature reads it, no worker prints it.
  const auto r = annotated(
      "RuntimeError: CUDA error: an illegal memory access was encountered\n"
      "CUDA kernel errors might be asynchronously reported at some other API call\n");
  ASSERT_EQ(r.kind, Result::Kind::kFound);
  for (const auto& c : r.symptoms) EXPECT_TRUE(c.faultline.empty()) << c.id;
  EXPECT_EQ(format_result(r, tables()).find("faultline:"), std::string::npos);
}

TEST(TriageDialect, AnEventFaultlinePrintsNoLineForSaysSo) {
  const auto r = annotated(
      "torchrun --nproc_per_node 8 train.py\n"
      "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 "
      "(pid: 812917) of binary: /usr/bin/python\n");
  const Candidate* got = produced(r);
  ASSERT_NE(got, nullptr) << format_result(r, tables());
  ASSERT_FALSE(got->faultline.matches.empty());
  const auto& m = got->faultline.matches.front();
  EXPECT_EQ(m.signature, "killed");
  EXPECT_TRUE(m.faultline.empty());
  EXPECT_FALSE(m.no_producer.empty());
  const std::string report = format_result(r, tables());
  EXPECT_NE(report.find("signature 'killed' (4.8 training, 5.1 serving), not printed by "
                        "faultline\n         (no line) faultline has no producer of this event: "),
            std::string::npos)
      << report;
  const auto j = nlohmann::json::parse(result_json(r, tables(), Input{}, "issue.txt").dump());
  const auto& ev = j.at("symptoms").at(0).at("faultline").at("events").at(0);
  EXPECT_TRUE(ev.at("faultline_line").is_null()) << ev.dump();
  EXPECT_EQ(ev.at("no_producer"), m.no_producer);
}

TEST(TriageDialect, AnEventOfFaultlinesOwnSentenceGetsItInBothDialects) {
  const auto r = annotated(
      "deepspeed --num_gpus 8 train.py\n"
      "OSError: [Errno 28] No space left on device: "
      "'/ckpt/global_step400/mp_rank_00_model_states.pt'\n");
  const Candidate* got = produced(r);
  ASSERT_NE(got, nullptr) << format_result(r, tables());
  const auto& m = got->faultline.matches.front();
  EXPECT_EQ(m.signature, "disk full");
  EXPECT_EQ(m.pytorch, m.faultline);
  EXPECT_NE(m.faultline.find("No space left on device"), std::string::npos);
  EXPECT_NE(format_result(r, tables())
                .find("         (both dialects) faultline worker error "
                      "(checkpoint): cannot write checkpoint file "),
            std::string::npos)
      << format_result(r, tables());
}

// Triage reads an issue's line with its paths masked, as fl-detect-logs reads a rank's (stop 49):
// a word of a directory (`truncated`, `oom-kill`, `watchdog`) is no event, and what is not a path
// keeps its reading.
TEST(TriageDialect, AWordOfAPathIsNoEventAsForTheDetector) {
  const struct {
    const char* line;
    const char* signature;  // nullptr: none
  } cases[] = {
      {"step 3 loss 2.3125, checkpoint saved to /data/truncated_wiki/global_step3", nullptr},
      {"Loading checkpoint from /data/oom-killer-repro/global_step400", nullptr},
      {"tensorboard logs under ./watchdog_runs/rank0", nullptr},
      {"torch.OutOfMemoryError: CUDA out of memory while loading "
       "'/data/truncated_wiki/mp_rank_00_model_states.pt'",
       "oom"},
      {"FileNotFoundError: [Errno 2] No such file or directory: '/data/truncated_wiki/train.bin'",
       "missing shard"},
      {"waiting for clients. 1/3 clients joined", "rank missing"},
  };
  for (const auto& c : cases) {
    const auto* got = dialect::classify(c.line);
    EXPECT_EQ(got ? got->name : "(none)", str(c.signature ? c.signature : "(none)")) << c.line;
    const auto* real = detect::logs::classify(c.line);
    EXPECT_EQ(got ? got->name : "(none)", str(real ? real->name : "(none)")) << c.line;
  }
}

// An issue whose healthy line names `/data/truncated_wiki/` beside its out-of-memory error: the
// candidate that carries the healthy line gets no corrupt-shard event, and the drafted scenario's
// base is chosen by the error's event only.
TEST(TriageDialect, AHealthyLineNamingAPathIsNotReadByAWordOfThePath) {
  const std::string healthy = "step 3 loss 2.3125, checkpoint saved to /data/truncated_wiki/step3";
  const std::string oom =
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total "
      "capacity of 79.15 GiB of which 1.05 GiB is free.";
  Result r;
  r.kind = Result::Kind::kFound;
  auto candidate = [](std::string id, double score, std::vector<EvidenceLine> evidence) {
    Candidate c;  // (GCC and clang disagree on which aggregate initializers leave a field out)
    c.id = std::move(id);
    c.score = score;
    c.evidence = std::move(evidence);
    return c;
  };
  r.symptoms.push_back(candidate("4.2", 3, {{1, healthy, "w"}, {2, oom, "cuda-oom"}}));
  r.symptoms.push_back(candidate("4.10", 1.5, {{1, healthy, "4.10 word 'checkpoint'"}}));
  EXPECT_EQ(evidence_events(r.symptoms[0]), std::vector<std::string>{"oom"});
  dialect::annotate(r, dialect::load_scenario_refs(default_scenario_dirs()));
  ASSERT_EQ(r.symptoms[0].faultline.matches.size(), 1u);
  EXPECT_EQ(r.symptoms[0].faultline.matches[0].signature, "oom");
  EXPECT_EQ(r.symptoms[0].faultline.matches[0].line, 2u);
  EXPECT_TRUE(r.symptoms[1].faultline.empty()) << r.symptoms[1].faultline.matches[0].signature;
}

nlohmann::json json_of(const std::string& text, Input* keep = nullptr) {
  std::istringstream in(text);
  const Input input = read_input(in, 16u << 20);
  auto r = triage(input, tables());
  dialect::annotate(r, dialect::load_scenario_refs(default_scenario_dirs()));
  if (keep) *keep = input;
  // Printed and parsed again, as a consumer of `--json` reads it.
  return nlohmann::json::parse(result_json(r, tables(), input, "issue.txt").dump(2));
}

TEST(TriageJson, TheReportRoundTripsItsKeyFields) {
  const auto j = json_of(
      "deepspeed --num_gpus 4 train.py --deepspeed ds_config.json\n"
      "[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
      "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n");
  EXPECT_EQ(j.at("answer"), "found");
  EXPECT_EQ(j.at("exit_status"), 0);
  EXPECT_EQ(j.at("input").at("lines"), 2);
  bool launcher = false;
  for (const auto& f : j.at("read")) {
    if (f.at("key") == "launcher") {
      launcher = true;
      EXPECT_EQ(f.at("value"), "deepspeed");
      EXPECT_EQ(f.at("line"), 1);
    }
  }
  EXPECT_TRUE(launcher) << j.dump(2);
  EXPECT_EQ(j.at("stage").at("id"), 4);
  EXPECT_EQ(j.at("confidence"), "strong");
  const auto& top = j.at("symptoms").at(0);
  EXPECT_EQ(top.at("id"), "4.11");
  EXPECT_EQ(top.at("name"), tables().taxonomy.symptom_name.at("4.11"));
  EXPECT_GT(top.at("score").get<double>(), 1.0);
  EXPECT_EQ(top.at("evidence").at(0).at("line"), 2);
  EXPECT_EQ(top.at("evidence").at(0).at("signature"), "c10d-watchdog-timeout");
  const auto& ev = top.at("faultline").at("events").at(0);
  EXPECT_EQ(ev.at("logs_signature"), "comm timeout");
  EXPECT_EQ(ev.at("symptom_training"), "4.7");
  EXPECT_EQ(ev.at("evidence_line"), 2);
  EXPECT_NE(ev.at("pytorch_line").get<std::string>().find("Watchdog caught"), std::string::npos);
  EXPECT_NE(ev.at("faultline_line").get<std::string>().find("comm timeout: "), std::string::npos);
  EXPECT_FALSE(j.at("root_causes").empty());
  EXPECT_FALSE(j.contains("error"));
}

TEST(TriageJson, TheDraftAndWhatItCouldNotExpressAreMembers) {
  Draft d;
  d.made = true;
  d.yaml = "name: x\n";
  d.base = "scenarios/symptoms/4.11-uneven-batches-hang.yaml";
  d.symptom = "4.11";
  d.root_cause = "R4.6";
  d.unexpressed.push_back({"setting", "launcher torchrun: faultline has no such launcher"});
  const auto j = nlohmann::json::parse(draft_json(d).dump());
  EXPECT_EQ(j.at("draft").at("yaml"), "name: x\n");
  EXPECT_EQ(j.at("draft").at("base"), d.base);
  EXPECT_EQ(j.at("could_not_express").at(0).at("kind"), "setting");
}

TEST(TriageJson, BadInputGivesAnErrorMemberAndTheSameExitStatus) {
  const auto empty = json_of(" \n\n");
  EXPECT_EQ(empty.at("error"), "the input is empty");
  EXPECT_EQ(empty.at("exit_status"), 1);
  std::string bin =
      "\x7f"
      "ELF";
  bin += std::string(64, '\0');
  const auto binary = json_of(bin);
  EXPECT_NE(binary.at("error").get<std::string>().find("the input is binary"), std::string::npos);
  EXPECT_EQ(binary.at("exit_status"), 2);
  EXPECT_FALSE(binary.contains("symptoms"));
  const auto none = json_of("Fix a typo in the README.\n");
  EXPECT_EQ(none.at("answer"), "none");
  EXPECT_EQ(none.at("exit_status"), 1);
  EXPECT_EQ(error_json("x: cannot open", 2).at("error"), "x: cannot open");
}

}  // namespace
}  // namespace fl::triage
