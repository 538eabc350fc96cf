// A seeded generator fuzz of the parsers that read what a user or another process wrote: the
// scenario loader, the fault plan grammar, the history reader (read back, summarised and judged),
// and the routes by which a rank's events reach a history: a command job's probe lines, a rank's
// events.jsonl read again by `verdict`, and a Connect stream of the real gRPC client (issue 32;
// these count every line or event they drop with the history's refused events, which is
// asserted, and get JSON nested past any stack among their mutations). Valid inputs are mutated
// (bit flips, truncations, structural tokens, huge numbers, bytes that are not UTF-8, repeated
// slices); every input must end in a result or one of the project's own errors (fl::Error and its
// kinds) — never a crash or another exception. The seed is fixed, so a failure names an input that
// reproduces; FAULTLINE_FUZZ_ITERATIONS runs more.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "base/utf8.hpp"
#include "harness/control/controller.hpp"
#include "harness/history/history.hpp"
#include "harness/history/probe_ingest.hpp"
#include "harness/model/scenario.hpp"
#include "harness/oracles/oracle.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "harness/run/runner.hpp"
#include "injector/plan.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

// JSON nested `n` levels: past the limit of 64 (and, at 100000, past any stack).
std::string deep(size_t n) {
  return std::string(n, '[') + std::string(n, ']');
}

int iterations() {
  const char* v = std::getenv("FAULTLINE_FUZZ_ITERATIONS");
  return v != nullptr && *v ? std::max(1, std::atoi(v)) : 2000;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::string> tokens) : rng_(seed), tokens_(std::move(tokens)) {
    for (const char* t :
         {"99999999999999999999999999", "1e308", "-1e400", "1e300g", "-1", "-2147483649", "nan",
          "inf", "0x7fffffffffffffff", "\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80",
          "\xc0\xaf", "\x00", "\t", "\r\n", "\\u0000", "\\ud800"}) {
      tokens_.emplace_back(t, t[0] == 0 ? 1 : std::strlen(t));
    }
  }
  std::string mutate(std::string s) {
    const int n = 1 + static_cast<int>(pick(4));
    for (int i = 0; i < n; ++i) {
      const size_t at = s.empty() ? 0 : pick(s.size() + 1);
      switch (pick(6)) {
        case 0:  // flip a bit
          if (!s.empty()) s[std::min(at, s.size() - 1)] ^= static_cast<char>(1u << pick(8));
          break;
        case 1:  // truncate
          s.resize(at);
          break;
        case 2:  // cut a slice out
          s.erase(at, pick(16) + 1);
          break;
        case 3:  // repeat a slice
          if (at < s.size()) {
            const std::string slice = s.substr(at, pick(64) + 1);
            for (size_t k = 0, r = pick(8) + 1; k < r; ++k) s.insert(at, slice);
          }
          break;
        default:  // insert a token (structural, number or bad bytes)
          s.insert(at, tokens_[pick(tokens_.size())]);
      }
    }
    return s;
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  std::mt19937_64 rng_;
  std::vector<std::string> tokens_;
};

struct Tally {
  int inputs = 0, accepted = 0, refused = 0;
  double slowest_s = 0;
};

// Runs `f` on one input: accepted, refused with a project error, or a test failure naming the
// input (any other exception; a crash ends the binary with the input in its last output).
template <class F>
void one(Tally& t, const std::string& what, const std::string& input, F&& f) {
  ++t.inputs;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f(input);
    ++t.accepted;
  } catch (const fl::Error&) {
    ++t.refused;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << typeid(e).name() << ": " << e.what()
                  << "\ninput (escaped): " << ::testing::PrintToString(input);
  }
  t.slowest_s = std::max(
      t.slowest_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void report(const char* what, const Tally& t) {
  // Recorded for the docs and CI logs; not asserted (a verdict never depends on machine load).
  std::printf("%s: %d inputs, %d accepted, %d refused with a project error, slowest %.3f s\n", what,
              t.inputs, t.accepted, t.refused, t.slowest_s);
}

TEST(InputFuzz, ScenarioLoader) {
  const std::string src = FAULTLINE_SOURCE_DIR;
  std::vector<std::string> seeds;
  for (const char* f :
       {"/scenarios/clean/clean-dp2-tp2.yaml", "/scenarios/clean/clean-jit-fetch.yaml",
        "/scenarios/symptoms/4.7-link-cut-mid-run.yaml", "/scenarios/symptoms/4.8-oom-killer.yaml",
        "/scenarios/symptoms/2.1-port-conflict.yaml",
        "/scenarios/symptoms/4.10-truncated-shard-resume.yaml",
        "/scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml"}) {
    if (fs::exists(src + f)) seeds.push_back(read_text(src + f));
  }
  ASSERT_FALSE(seeds.empty());
  const auto dir = fl::test::removed_at_exit(fs::temp_directory_path() /
                                             ("faultline-fuzz-" + std::to_string(::getpid())));
  fs::create_directories(dir);
  const std::string file = (dir / "s.yaml").string();
  Mutator m(16001, {":",
                    ": ",
                    "- ",
                    "{",
                    "}",
                    "[",
                    "]",
                    ",",
                    "\n",
                    "\n  ",
                    "---\n",
                    "...\n",
                    "&a ",
                    "*a",
                    "<<: *a\n",
                    "!!binary ",
                    "!!map ",
                    "? ",
                    "|\n",
                    ">-\n",
                    "'",
                    "\"",
                    "#",
                    "%YAML 1.2\n",
                    "extends: s.yaml\n",
                    "faults[0]",
                    "plan: \"x[rank=-1]=drop\"",
                    "rank: -1\n",
                    "env: {A: b, A: c}\n",
                    "memory_limit: 1e300g"});
  Tally t;
  const int n = iterations();
  for (int i = 0; i < n; ++i) {
    const std::string input = m.mutate(seeds[static_cast<size_t>(i) % seeds.size()]);
    { std::ofstream(file, std::ios::binary | std::ios::trunc) << input; }
    one(t, "load_scenario", input, [&](const std::string&) { load_scenario(file); });
  }
  report("scenario loader", t);
  fs::remove_all(dir);
}

TEST(InputFuzz, PlanGrammar) {
  const std::vector<std::string> seeds = {
      "comm.all_reduce[rank=1,group=dp,seq=4]=reorder",
      "data.fetch[rank=3,step=8-100]=delay(150)",
      "comm.all_reduce[rank=1,group=dp,seq=2]=retype(fp16)",
      "optimizer.step[rank=1]=leak(20000000)",
      "infer.forward[rank=1,step=4-100]=delay(100);plugin.load[rank=1]=delay(4000)",
      "comm.all_reduce[rank=0-3,every=2,skip=1]=drop"};
  Mutator m(16002, {"[",      "]",     "(",     ")",    "=",      ",",     ";",  "-",
                    ".",      "rank=", "step=", "seq=", "every=", "skip=", "p=", "0.5",
                    "delay(", "drop",  "x",     " ",    "@",      "%"});
  Tally t;
  const int n = iterations();
  for (int i = 0; i < n; ++i) {
    const std::string input = m.mutate(seeds[static_cast<size_t>(i) % seeds.size()]);
    one(t, "parse_plan", input, [](const std::string& s) {
      const auto plan = fault::parse_plan(s, "fuzz");
      (void)fault::to_string(plan);
    });
  }
  report("plan grammar", t);
}

TEST(InputFuzz, HistoryReader) {
  // A small run's history: start, launches, steps, a collective, output, an error, exits, end.
  const std::string seed =
      R"({"i":0,"t_ns":0,"source":"harness","rank":-1,"seq":0,"time_unix_ns":1,"kind":"run_start","step":-1,"data":{"ranks":2,"run_id":"r","scenario":"s"}}
{"i":1,"t_ns":10,"source":"harness","rank":0,"seq":0,"time_unix_ns":1,"kind":"launch","step":-1,"data":{"pid":5}}
{"i":2,"t_ns":11,"source":"harness","rank":1,"seq":0,"time_unix_ns":1,"kind":"launch","step":-1,"data":{"pid":6}}
{"i":3,"t_ns":50,"source":"rank","rank":0,"seq":1,"time_unix_ns":1,"kind":"step","step":0,"data":{"loss":2.5,"step_time_s":0.1,"interval_s":0.1,"comm_s":0.01,"mem_current":1024}}
{"i":4,"t_ns":51,"source":"rank","rank":1,"seq":1,"time_unix_ns":1,"kind":"step","step":0,"data":{"loss":null,"step_time_s":0.3}}
{"i":5,"t_ns":60,"source":"rank","rank":1,"seq":2,"time_unix_ns":1,"kind":"collective","step":1,"data":{"op":"all_reduce","group":"dp","seq":3,"state":"timed-out","in_flight_ms":500}}
{"i":6,"t_ns":61,"source":"harness","rank":1,"seq":0,"time_unix_ns":1,"kind":"output","step":-1,"data":{"stream":"stderr","line":"out of memory on rank 1","process":"rank1"}}
{"i":7,"t_ns":62,"source":"rank","rank":1,"seq":3,"time_unix_ns":1,"kind":"error","step":1,"data":{"class":"comm timeout","message":"all_reduce timed out","exit_code":20}}
{"i":8,"t_ns":70,"source":"harness","rank":1,"seq":0,"time_unix_ns":1,"kind":"rank_exit","step":-1,"data":{"class":"error","code":20,"signaled":false,"by_harness":false}}
{"i":9,"t_ns":71,"source":"detector:comm","rank":-1,"seq":0,"time_unix_ns":1,"kind":"diagnosis","step":1,"data":{"detector":"comm","symptom":"2.2","ranks":[1],"confidence":0.9}}
{"i":10,"t_ns":80,"source":"harness","rank":-1,"seq":0,"time_unix_ns":1,"kind":"run_end","step":-1,"data":{"reason":"all ranks ended"}}
)";
  const auto dir = fl::test::removed_at_exit(fs::temp_directory_path() /
                                             ("faultline-fuzzh-" + std::to_string(::getpid())));
  fs::create_directories(dir);
  const std::string file = (dir / "history.jsonl").string();
  Mutator m(16003, {"{",
                    "}",
                    "[",
                    "]",
                    ",",
                    ":",
                    "\"",
                    "\n",
                    "null",
                    "true",
                    "-1",
                    "-3",
                    "\"rank\":-7,",
                    "\"ranks\":\"x\",",
                    "\"step\":-5,",
                    "\"data\":[],",
                    "\"loss\":\"x\",",
                    "1.5",
                    "\"i\":",
                    "\\",
                    "\\u00ff",
                    deep(70),
                    std::string(100000, '[')});
  std::vector<Expect> expects(4);
  expects[0].oracle = "completed";
  expects[1] = parse_expect_text("{oracle: error_signature, pattern: out of memory}");
  expects[2].oracle = "comm_timeout";
  expects[3].oracle = "loss_nonfinite";
  Tally t;
  const int n = iterations();
  for (int i = 0; i < n; ++i) {
    const std::string input = m.mutate(seed);
    { std::ofstream(file, std::ios::binary | std::ios::trunc) << input; }
    one(t, "read_history+judge", input, [&](const std::string&) {
      const auto events = read_history(file);
      (void)summarize(events);
      (void)judge(expects[static_cast<size_t>(i) % expects.size()], events);
    });
  }
  report("history reader", t);
  fs::remove_all(dir);
}

// The rank lines a probe or a worker writes, for the rank-line routes.
const std::vector<std::string> kRankLines = {
    R"({"seq":0,"time_unix_ns":1,"kind":"hello","step":-1,"data":{"world_size":1,"pid":5}})",
    R"({"seq":1,"time_unix_ns":2,"kind":"step","step":0,"data":{"loss":2.5,"step_time_s":0.1}})",
    R"({"rank":0,"seq":2,"time_unix_ns":3,"kind":"collective","step":1,"data":{"op":"all_reduce","state":"started","group":"dp","seq":3}})",
    R"({"seq":3,"time_unix_ns":4,"kind":"section","step":1,"data":{"name":"checkpoint","state":"begin"}})",
    R"({"seq":4,"time_unix_ns":5,"kind":"log","step":-1,"data":{"message":"hi","level":"info"}})",
    R"({"seq":5,"time_unix_ns":6,"kind":"heartbeat","step":2,"data":{}})"};

Mutator rank_line_mutator(uint64_t seed) {
  return Mutator(seed, {"{", "}", "[", "]", ",", ":", "\"", "\n", "null", "-1",
                        "\"data\":", "\"kind\":\"step\",", "\"step\":-4,", deep(65), deep(2000),
                        std::string(100000, '['), std::string(3000, '{') + "\"a\":"});
}

// A file of a few mutated rank lines (a final line without its newline left half-written).
std::string rank_file(Mutator& m, int i) {
  std::string text;
  for (int k = 0; k < 6; ++k) {
    text += m.mutate(kRankLines[static_cast<size_t>(i + k) % kRankLines.size()]);
    text += '\n';
  }
  return text;
}

// The complete lines of `text` that are not empty: what a reader must ingest or count.
int complete_lines(const std::string& text) {
  int n = 0;
  size_t start = 0;
  for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
    n += nl > start;
    start = nl + 1;
  }
  return n;
}

TEST(InputFuzz, ProbeLinesAreIngestedOrCountedNeverFatal) {
  const auto dir = fl::test::removed_at_exit(fs::temp_directory_path() /
                                             ("faultline-fuzzp-" + std::to_string(::getpid())));
  fs::create_directories(dir / "ranks/rank0");
  Mutator m = rank_line_mutator(16004);
  Tally t;
  const int n = std::max(1, iterations() / 4);
  for (int i = 0; i < n; ++i) {
    const std::string input = rank_file(m, i);
    fs::remove(dir / "history.jsonl");
    { std::ofstream(probe_file(dir.string(), 0), std::ios::binary | std::ios::trunc) << input; }
    one(t, "probe ingest", input, [&](const std::string& text) {
      History h((dir / "history.jsonl").string());
      h.harness("run_start", {{"ranks", 1}});
      ProbeIngest ingest(dir.string(), 1);
      ingest.poll(h);
      EXPECT_EQ(ingest.poll(h), 0u);  // nothing read twice
      // Every complete line is an event in the history or a refusal counted there.
      EXPECT_EQ(static_cast<int>(h.size() - 1 + h.rejected()), complete_lines(text))
          << ::testing::PrintToString(text.substr(0, 2000));
      EXPECT_EQ(ingest.ingested() + ingest.unparsable(),
                static_cast<uint64_t>(complete_lines(text)));
    });
  }
  report("probe lines", t);
  fs::remove_all(dir);
}

TEST(InputFuzz, EventsFilesAreMergedOrSkippedWhenARunIsJudgedAgain) {
  const auto dir = fl::test::removed_at_exit(fs::temp_directory_path() /
                                             ("faultline-fuzze-" + std::to_string(::getpid())));
  fs::create_directories(dir / "ranks/rank0");
  std::ofstream(dir / "history.jsonl")
      << R"({"i":0,"t_ns":0,"source":"harness","rank":-1,"seq":0,"time_unix_ns":1,)"
      << R"("kind":"run_start","step":-1,"data":{"ranks":1}})"
      << "\n";
  Mutator m = rank_line_mutator(16005);
  Tally t;
  const int n = std::max(1, iterations() / 4);
  for (int i = 0; i < n; ++i) {
    const std::string input = rank_file(m, i);
    {
      std::ofstream(dir / "ranks/rank0/events.jsonl", std::ios::binary | std::ios::trunc) << input;
    }
    one(t, "events.jsonl", input, [&](const std::string& text) {
      const auto got = history_with_rank_files(dir.string());
      EXPECT_LE(got.recovered, complete_lines(text));
      (void)summarize(got.events);
    });
  }
  report("events.jsonl", t);
  fs::remove_all(dir);
}

TEST(InputFuzz, ConnectBatchesAreAppendedOrCountedNeverFatal) {
  const auto dir = fl::test::removed_at_exit(fs::temp_directory_path() /
                                             ("faultline-fuzzc-" + std::to_string(::getpid())));
  fs::create_directories(dir);
  History h((dir / "history.jsonl").string());
  const auto no_actions = [](const ControlAction&) { return ControlResult{false, "", {}}; };
  Controller c(h, no_actions, "fuzz");
  const std::string addr = c.start("unix:" + (dir / "control.sock").string());
  h.harness("run_start", {{"ranks", 2}});
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"step", R"({"loss":2.5,"step_time_s":0.1,"mem_current":1024})"},
      {"collective", R"({"op":"all_reduce","state":"completed","group":"dp","seq":3})"},
      {"error", R"({"class":"comm timeout","message":"all_reduce timed out","exit_code":20})"},
      {"log", R"({"message":"x","level":"warn"})"},
      {"output", R"({"what":"logits","digest":"ab12"})"}};
  Mutator m(16006, {"{", "}", "[", "]", ",", ":", "\"", "null", "1e999", "\"loss\":\"x\",",
                    deep(64), deep(65), deep(5000), std::string(100000, '[')});
  auto stub = faultline::v1::Controller::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata(kControlSecretHeader, "fuzz");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto stream = stub->Connect(&ctx);
  Tally t;
  uint64_t sent = 0;
  const int n = std::max(1, iterations() / 8);
  for (int i = 0; i < n; ++i) {
    faultline::v1::EventBatch batch;
    for (int k = 0; k < 8; ++k) {
      const auto& [kind, data] = seeds[static_cast<size_t>(i + k) % seeds.size()];
      auto* e = batch.add_events();
      e->set_rank(k % 2);
      e->set_seq(sent++);
      e->set_kind(kind);
      e->set_step(i);
      // A proto3 string is UTF-8 on the wire (the server would refuse the whole message).
      e->set_data_json(valid_utf8(m.mutate(data)));
    }
    ++t.inputs;
    ASSERT_TRUE(stream->Write(batch)) << "the stream broke at batch " << i;
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  c.shutdown();
  EXPECT_EQ(c.events_ingested(), sent);
  // Every event sent is in the history or counted as refused: none lost, none fatal.
  EXPECT_EQ(h.size() - 1 + h.rejected(), sent);
  EXPECT_GT(h.rejected(), 0u);
  std::printf("connect: %llu events, %llu refused\n", static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(h.rejected()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::harness
