// A seeded generator fuzz of the three parsers that read what a user or another process wrote:
// the scenario loader, the fault plan grammar and the history reader (read back, summarised and
// judged). Valid inputs are mutated (bit flips, truncations, structural tokens, huge numbers,
// bytes that are not UTF-8, repeated slices); every input must end in a result or one of the
// project's own errors (fl::Error and its kinds) — never a crash or another exception. The seed is
// fixed, so a failure names an input that reproduces; FAULTLINE_FUZZ_ITERATIONS runs more.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "base/error.hpp"
#include "harness/oracles/oracle.hpp"
#include "harness/run/history.hpp"
#include "harness/scenario/scenario.hpp"
#include "injector/plan.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

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
  const auto dir = fs::temp_directory_path() / ("faultline-fuzz-" + std::to_string(::getpid()));
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
  const auto dir = fs::temp_directory_path() / ("faultline-fuzzh-" + std::to_string(::getpid()));
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
                    "\\u00ff"});
  std::vector<Expect> expects(4);
  expects[0].oracle = "completed";
  expects[1].oracle = "error_signature";
  expects[1].pattern = "out of memory";
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

}  // namespace
}  // namespace fl::harness
