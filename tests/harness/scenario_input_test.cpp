// What `faultline validate` must refuse before a run starts (issue 16, items 3 and 7): each bad
// input gets one error with file:line:col. Also the scale cases: a 40k-key env map loads through
// linear code (the merge no longer looks keys up one by one), and a file over the size limit is
// refused before it is parsed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/model/scenario.hpp"
#include "harness/scenario/loader.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;

class ScenarioInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fl::test::fresh_test_dir(
        "input", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // The error with the test directory cut from the file name ("s.yaml:3:5: ...").
  std::string error_of(const std::string& text, LoadOptions o = {}) {
    const auto p = write("s.yaml", text);
    try {
      load_scenario(p, o);
    } catch (const ScenarioError& e) {
      std::string m = e.what();
      for (size_t at; (at = m.find(p)) != std::string::npos;) m.replace(at, p.size(), "s.yaml");
      return m;
    }
    return "no error";
  }
  fs::path dir_;
};

TEST_F(ScenarioInput, PluginNamesMustBeIdentifiers) {
  EXPECT_EQ(error_of("name: a\nworkload:\n  plugins: [fused_adamw, \"p'$(id>x)'q\"]\n"),
            "s.yaml:3:26: workload.plugins[1]: 'p'$(id>x)'q' is not a plugin name (allowed: a "
            "letter or '_', then letters, digits or '_', up to 64; the library is "
            "libfl_NAME.so)");
  EXPECT_NE(error_of("name: a\nworkload: {plugins: [9lives]}\n").find("s.yaml:2:22: "),
            std::string::npos);
  EXPECT_NE(error_of("name: a\nworkload: {plugins: [../x]}\n").find("is not a plugin name"),
            std::string::npos);
  // Through a fix and --set too.
  EXPECT_NE(error_of("name: a\nfix:\n  workload: {plugins: [\"a b\"]}\n").find("s.yaml:3:24: "),
            std::string::npos);
  LoadOptions o;
  o.overrides = {"workload.plugins=[\"x;y\"]"};
  EXPECT_NE(error_of("name: a\n", o).find("is not a plugin name"), std::string::npos);
  EXPECT_EQ(error_of("name: a\nworkload: {plugins: [fused_adamw, _x1]}\n"), "no error");
}

TEST_F(ScenarioInput, InvalidExpectPatternIsAValidateError) {
  EXPECT_EQ(error_of("name: a\nexpect:\n  oracle: error_signature\n  pattern: \"(unclosed\"\n")
                .rfind("s.yaml:4:12: expect.pattern: '(unclosed' is not a valid regex", 0),
            0u);
  EXPECT_EQ(error_of("name: a\nexpect: {oracle: error_signature, pattern: \"out of (mem|x)\"}\n"),
            "no error");
}

TEST_F(ScenarioInput, SizesThatOverflowOrAreNegativeAreRefused) {
  const std::string allowed =
      "is not a size (allowed: a positive number of bytes with an optional k, m or g suffix, "
      "from 1 byte to 1 PiB)";
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {memory_limit: 1e300g, rank: 0}\n"),
            "s.yaml:3:20: faults[0].memory_limit: '1e300g' " + allowed);
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {memory_limit: -5m, rank: 0}\n"),
            "s.yaml:3:20: faults[0].memory_limit: '-5m' " + allowed);
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {memory_limit: nan, rank: 0}\n"),
            "s.yaml:3:20: faults[0].memory_limit: 'nan' " + allowed);
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {memory_limit: 300m, rank: 0}\n"), "no error");
}

TEST_F(ScenarioInput, UnknownHiddenLibraryIsRefused) {
  const std::string e = error_of(
      "name: a\nfaults:\n  - {hide: libfl_nothing.so, rank: 1}\n"
      "topology: {ranks: 2}\n");
  if (e == "no error") GTEST_SKIP() << "this build has no plugin directory";
  EXPECT_EQ(e.rfind("s.yaml:3:12: faults[0].hide: no library 'libfl_nothing.so' in the plugin "
                    "directory ",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find("libfl_fused_adamw.so"), std::string::npos) << e;
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {hide: libfl_fused_adamw.so, rank: 1}\n"
                     "topology: {ranks: 2}\n"),
            "no error");
}

TEST_F(ScenarioInput, FetchAndPortSquatWithNetworkNamespacesAreRefused) {
  const std::string net = "  - {network: {action: bandwidth, rate: 1mbit}, at: launch}\n";
  EXPECT_EQ(error_of("name: a\nworkload:\n  fetch: [tokenizer.json]\nfaults:\n" + net)
                .rfind("s.yaml:3:10: workload.fetch: cannot fetch with network namespaces", 0),
            0u);
  EXPECT_EQ(error_of("name: a\nfaults:\n" + net + "  - {port_squat: true}\n")
                .rfind("s.yaml:4:18: faults[1].port_squat: port_squat with network namespaces "
                       "is not supported",
                       0),
            0u);
  EXPECT_EQ(error_of("name: a\ntopology: {network: namespaces}\nfaults:\n  - {port_squat: true}\n")
                .rfind("s.yaml:4:18: faults[0].port_squat:", 0),
            0u);
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {port_squat: true}\n"), "no error");
}

TEST_F(ScenarioInput, BadTcRatesAreRefused) {
  for (const std::string bad : {"fast", "0mbit", "-1mbit", "1.2.3mbit", "1e400bit", "5 mbit"}) {
    const std::string e = error_of("name: a\nfaults:\n  - {network: {action: bandwidth, rate: \"" +
                                   bad + "\"}, at: launch}\n");
    EXPECT_EQ(e.rfind("s.yaml:3:41: faults[0].network.rate: '" + bad + "' is not a tc rate", 0), 0u)
        << e;
  }
  for (const std::string good : {"1mbit", "500kbit", "2.5mbps", "100kibit", "8bit"}) {
    EXPECT_EQ(error_of("name: a\nfaults:\n  - {network: {action: bandwidth, rate: \"" + good +
                       "\"}, at: launch}\n"),
              "no error")
        << good;
  }
}

TEST_F(ScenarioInput, SecondPortsAndRoutesThroughThemAreCheckedAtTheirKeys) {
  const std::string two = "name: a\ntopology: {ranks: 2, nodes: 2, nics: [8mbit]}\nfaults:\n";
  EXPECT_EQ(error_of(two + "  - {network: {action: route, node: 1, nic: 1}, at: launch}\n"),
            "no error");
  EXPECT_EQ(error_of(two + "  - {network: {action: route, node: 1, nic: 2}, at: launch}\n")
                .rfind("s.yaml:4:45: faults[0].network.nic: eth2 does not exist (allowed 0-1", 0),
            0u);
  EXPECT_EQ(error_of(two + "  - {network: {action: route, node: 1}, at: launch}\n")
                .rfind("s.yaml:4:15: faults[0].network.nic: route sends the node's traffic out "
                       "through another interface than eth0 (allowed 1-1",
                       0),
            0u);
  EXPECT_EQ(error_of(two + "  - {network: {action: bandwidth, node: 1, nic: 1}, at: launch}\n")
                .rfind("s.yaml:4:49: faults[0].network.nic: eth1 is already limited to 8mbit", 0),
            0u);
  EXPECT_EQ(error_of(two + "  - {network: {action: drop, node: 1, nic: 1}, at: launch}\n")
                .rfind("s.yaml:4:44: faults[0].network.nic: drop cuts the node's links", 0),
            0u);
  EXPECT_EQ(error_of("name: a\ntopology: {nics: [fast]}\n")
                .rfind("s.yaml:2:19: topology.nics[0]: 'fast' is not a tc rate", 0),
            0u);
  EXPECT_EQ(error_of("name: a\ntopology: {nics: [unlimited, 1mbit, 2mbit, 3mbit]}\n")
                .rfind("s.yaml:2:18: topology.nics: a list of at most 3 interfaces", 0),
            0u);
  EXPECT_EQ(error_of("name: a\ntopology: {nics: [unlimited]}\n"), "no error");
  // Without topology.nics there is no second port to name; between hosts none can be made.
  EXPECT_EQ(
      error_of("name: a\ntopology: {ranks: 2, nodes: 2}\nfaults:\n"
               "  - {network: {action: route, node: 1}, at: launch}\n"),
      "s.yaml:4:15: faults[0].network.nic: route sends the node's traffic out through another "
      "interface than eth0 (topology.nics lists no interface besides eth0: add one, e.g. "
      "topology.nics: [8mbit])");
  const std::string hosts =
      "name: a\ntopology: {ranks: 2, launcher: mpirun, hosts: [a=10.9.0.1, "
      "b=10.9.0.2]";
  for (const std::string fault : {"action: route, node: 1", "action: bandwidth, node: 1, nic: 1"}) {
    EXPECT_EQ(error_of(hosts + "}\nfaults:\n  - {network: {" + fault + "}, at: launch}\n"),
              "s.yaml:4:15: faults[0].network: route and nic need the nodes' network namespaces "
              "on this machine (topology.nics), not topology.hosts")
        << fault;
  }
  EXPECT_EQ(error_of(hosts + ", nics: [8mbit]}\n")
                .rfind("s.yaml:2:79: topology.nics: interfaces are made in this machine's network "
                       "namespaces, not on topology.hosts",
                       0),
            0u);
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 2, nodes: 2, launcher: mpirun, nics: [8mbit]}\n")
                .rfind("s.yaml:2:56: topology.nics: the nodes' interfaces live in network "
                       "namespaces, which need topology.launcher: local",
                       0),
            0u);
  EXPECT_NE(error_of("name: a\ntopology: {nics: [fast]}\n").find("(or unlimited)"),
            std::string::npos);
}

TEST_F(ScenarioInput, DuplicateKeysAreRefusedWhereverTheyAre) {
  EXPECT_EQ(error_of("name: a\nworkload:\n  steps: 3\n  steps: 4\n"),
            "s.yaml:4:3: workload.steps: duplicate key (first at line 3, column 3)");
  EXPECT_EQ(error_of("name: a\nname: b\n"),
            "s.yaml:2:1: name: duplicate key (first at line 1, column 1)");
  EXPECT_EQ(error_of("name: a\nenv: {A: '1', B: '2', A: '3'}\n"),
            "s.yaml:2:23: env.A: duplicate key (first at line 2, column 7)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {signal: KILL, rank: 0, rank: 1, at: launch}\n"),
            "s.yaml:3:29: faults[0].rank: duplicate key (first at line 3, column 20)");
}

TEST_F(ScenarioInput, ASecondDocumentIsRefused) {
  EXPECT_EQ(error_of("name: a\n---\nname: b\n"),
            "s.yaml:3:1: a second YAML document (a scenario file holds one; split it into files)");
  EXPECT_EQ(error_of("---\nname: a\n...\n"),
            "no error");  // one document with its markers
  EXPECT_EQ(error_of("name: a\n---\n"),
            "s.yaml:2:1: a second YAML document (a scenario file holds one; split it into files)");
}

// Ten lines whose aliases name a billion nodes: refused after a walk bounded by the size limit.
TEST_F(ScenarioInput, AliasesThatExpandWithoutBoundAreRefused) {
  std::string text = "name: a\nx0: &a0 [q, q, q, q, q, q, q, q, q, q]\n";
  for (int i = 1; i < 9; ++i) {
    text += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  EXPECT_EQ(error_of(text), "s.yaml: the document expands to more than " +
                                std::to_string(loader::scenario_max_bytes()) +
                                " nodes (aliases repeating nodes; allowed: as many as "
                                "FAULTLINE_SCENARIO_MAX_BYTES)");
}

TEST_F(ScenarioInput, NonUtf8TextIsRefusedWithItsPlace) {
  EXPECT_EQ(error_of("name: a\ndescription: \"bad \xff byte\"\n"),
            "s.yaml:2:19: the file is not UTF-8 text (byte 0xff)");
}

TEST_F(ScenarioInput, SetWithAListIndexAppliesOrIsRefused) {
  const std::string text =
      "name: a\ntopology: {ranks: 2}\nfaults:\n  - {signal: KILL, "
      "rank: 1, at: step, step: 2}\n";
  // An index that is there changes that item; the item is validated again as a whole.
  LoadOptions o;
  o.overrides = {"faults[0].rank=0"};
  auto s = load_scenario(write("ok.yaml", text), o);
  ASSERT_EQ(s.faults.oop.size(), 1u);
  EXPECT_EQ(s.resolved["faults"][0]["rank"].as<int>(), 0);
  EXPECT_FALSE(s.resolved["faults[0]"]) << "no stray top-level key";
  // A plan beside a signal: two kinds in one item.
  o.overrides = {"faults[0].plan=comm.all_reduce[rank=0]=drop"};
  EXPECT_EQ(
      error_of(text, o).rfind(
          "s.yaml (--set faults[0].plan):4:5: faults[0]: names two faults, plan and signal", 0),
      0u)
      << error_of(text, o);
  // One past the last adds an item; further is refused.
  o.overrides = {"faults[1]={plan: \"comm.all_reduce[rank=0]=drop\"}"};
  s = load_scenario(write("ok2.yaml", text), o);
  EXPECT_EQ(s.faults.plans.size(), 1u);
  o.overrides = {"faults[5].plan=x"};
  EXPECT_EQ(error_of(text, o),
            "--set 'faults[5].plan=x': faults has 1 item(s) (allowed index 0-0; index 1 adds "
            "one)");
  // A bad plan through --set is refused like one in the file.
  o.overrides = {"faults[1]={plan: \"not a plan\"}"};
  EXPECT_NE(error_of(text, o).find("faults[1].plan: "), std::string::npos) << error_of(text, o);
  o.overrides = {"faults[0].bogus=1"};
  EXPECT_EQ(error_of(text, o).rfind("--set 'faults[0].bogus=1': unknown key faults[0].bogus", 0),
            0u);
  o.overrides = {"env={A: '1', A: '2'}"};
  EXPECT_EQ(error_of(text, o).rfind("s.yaml (--set env):1:", 0), 0u) << error_of(text, o);
}

TEST_F(ScenarioInput, AFileOverTheSizeLimitIsRefusedBeforeParsing) {
  const int64_t max = loader::scenario_max_bytes();
  std::string big = "name: a\ndescription: \"";
  big.append(static_cast<size_t>(max), 'x');
  big += "\"\n";
  const std::string e = error_of(big);
  EXPECT_EQ(e, "s.yaml: the file is " + std::to_string(big.size()) + " bytes (allowed: up to " +
                   std::to_string(max) + "; FAULTLINE_SCENARIO_MAX_BYTES sets the limit)");
}

// 40k keys: every step of the load is linear (the old merge looked up each key by scanning the
// map: 104 s). Timing is not asserted; the note in docs/scenarios.md has the measurement.
TEST_F(ScenarioInput, ForthyThousandEnvKeysLoadAndKeepTheirValues) {
  std::string text = "name: a\nenv:\n";
  for (int i = 0; i < 40000; ++i)
    text += "  K" + std::to_string(i) + ": v" + std::to_string(i) + "\n";
  LoadOptions o;
  o.overrides = {"env.K39999=last"};
  auto s = load_scenario(write("big.yaml", text), o);
  ASSERT_EQ(s.env.all.size(), 40000u);
  EXPECT_EQ(s.env.all.at("K0"), "v0");
  EXPECT_EQ(s.env.all.at("K39999"), "last");
  EXPECT_EQ(s.resolved["env"].size(), 40000u);
}

// The merge keeps the order of the base's keys, replaces what `over` names and appends the rest.
TEST(ScenarioMerge, MapsMergeKeyByKeyInOrder) {
  YAML::Node base = YAML::Load("{a: 1, b: {x: 1, y: 2}, c: [1, 2]}");
  YAML::Node over = YAML::Load("{b: {y: 3, z: 4}, c: [9], d: 5}");
  YAML::Node m = loader::merge(base, over);
  YAML::Emitter em;
  em << YAML::Flow << m;
  EXPECT_STREQ(em.c_str(), "{a: 1, b: {x: 1, y: 3, z: 4}, c: [9], d: 5}");
  EXPECT_EQ(base["b"]["y"].as<int>(), 2) << "the inputs are left as they were";
}

TEST_F(ScenarioInput, InferencePromptsMustFitTheContext) {
  // tiny's context is 16 tokens: a longer prompt, or a prompt and its new tokens that do not fit,
  // fail at their key; workload.shape.seq_len widens the context.
  EXPECT_EQ(
      error_of("name: a\nworkload:\n  kind: infer\n  infer: {prompt_len: 20, new_tokens: 4}\n"),
      "s.yaml:4:23: workload.infer.prompt_len: a prompt of 20 tokens is longer than the "
      "context of 16 tokens (model tiny) (allowed: 1-16)");
  EXPECT_EQ(
      error_of("name: a\nworkload:\n  kind: infer\n  infer: {prompt_len: 8, new_tokens: 9}\n"),
      "s.yaml:4:38: workload.infer.new_tokens: 9 new tokens after a prompt of 8 do not fit in "
      "the context of 16 tokens (model tiny) (allowed: 1-8)");
  EXPECT_EQ(error_of("name: a\nworkload:\n  kind: infer\n  shape: {seq_len: 32}\n"
                     "  infer: {prompt_len: 20, new_tokens: 12}\n"),
            "no error");
  EXPECT_NE(error_of("name: a\nworkload:\n  kind: infer\n  shape: {seq_len: 32}\n"
                     "  infer: {prompt_len: 33, new_tokens: 1}\n")
                .find("(workload.shape.seq_len 32) (allowed: 1-32)"),
            std::string::npos);
  // small's context is 64; training scenarios are not checked.
  EXPECT_EQ(error_of("name: a\nworkload: {kind: infer, model: small, infer: {prompt_len: 40, "
                     "new_tokens: 24}}\n"),
            "no error");
  EXPECT_EQ(error_of("name: a\nworkload: {infer: {prompt_len: 40}}\n"), "no error");
  // Stop 56: context_limit clamp or none lets the request ask for more (the engine clamps it, or
  // fails at the context's end); refuse is the default's check. A prompt longer than the context
  // is still refused.
  for (const char* limit : {"clamp", "none"}) {
    EXPECT_EQ(error_of(fmt::format("name: a\nworkload:\n  kind: infer\n  infer: {{prompt_len: 8, "
                                   "new_tokens: 12, context_limit: {}}}\n",
                                   limit)),
              "no error")
        << limit;
  }
  EXPECT_NE(error_of("name: a\nworkload:\n  kind: infer\n  infer: {prompt_len: 8, new_tokens: 12, "
                     "context_limit: refuse}\n")
                .find("12 new tokens after a prompt of 8 do not fit"),
            std::string::npos);
  EXPECT_NE(error_of("name: a\nworkload:\n  kind: infer\n  infer: {prompt_len: 20, new_tokens: 1, "
                     "context_limit: none}\n")
                .find("a prompt of 20 tokens is longer than the context"),
            std::string::npos);
}

TEST_F(ScenarioInput, TheSamplingSeedIsTheScenariosSeed) {
  // The harness passes `seed` to inference ranks as --seed: a workload.infer.seed of another value
  // would be overridden without a word, so the loader refuses it at its key; 0 (the default: the
  // scenario's seed, what a run's resolved scenario.yaml holds) and the scenario's own value load.
  EXPECT_EQ(
      error_of("name: a\nworkload:\n  kind: infer\n  infer: {seed: 3, seed_offset: rank}\n"),
      "s.yaml:4:17: workload.infer.seed: 3 is not the scenario's seed 7: the harness passes "
      "`seed` to every rank as --seed, so this value would be overridden (allowed: 0 or 7; set "
      "the top-level `seed` instead; workload.infer.seed_offset varies it per rank)");
  EXPECT_EQ(error_of("name: a\nseed: 3\nworkload:\n  kind: infer\n  infer: {seed: 3}\n"),
            "no error");
  EXPECT_EQ(error_of("name: a\nworkload:\n  kind: infer\n  infer: {seed: 0}\n"), "no error");
  EXPECT_EQ(error_of("name: a\nseed: 3\nworkload:\n  kind: infer\n  infer: {seed_offset: rank}\n"),
            "no error");
}

TEST_F(ScenarioInput, FrameworkCallKeysAreCheckedWithTheirPlace) {
  EXPECT_EQ(error_of("name: a\nworkload:\n  infer: {load: all}\n"),
            "s.yaml:3:17: workload.infer.load: 'all' is not allowed (allowed: sharded, full)");
  EXPECT_NE(error_of("name: a\nworkload:\n  eval_data: {samples: -1}\n").find("s.yaml:3:24: "),
            std::string::npos);
  EXPECT_NE(error_of("name: a\nworkload:\n  eval_data: {drop_last: maybe}\n").find("s.yaml:3:26: "),
            std::string::npos);
  EXPECT_EQ(
      error_of("name: a\nworkload: {eval_every: 2, eval_data: {samples: 18, drop_last: true}}\n"),
      "no error");
  const auto p = write("ok.yaml",
                       "name: a\nworkload: {eval_every: 2, eval_data: {samples: 18, drop_last: "
                       "true}, shape: {d_model: 64}}\n");
  const Scenario s = load_scenario(p);
  EXPECT_EQ(s.workload.get<int64_t>("workload.eval_data.samples"), 18);
  EXPECT_TRUE(s.workload.get<bool>("workload.eval_data.drop_last"));
  EXPECT_EQ(s.workload.get<int64_t>("workload.shape.d_model"), 64);
  EXPECT_EQ(s.workload.get<std::string>("workload.infer.load"), "sharded");
}

// Issue 32, item 6: what only the launch refused (leaving a run directory, or splitting an
// argument and judging the run `fail`) is refused at load, with file:line:col.
TEST_F(ScenarioInput, VariablesTheHarnessSetsCannotBeSetByTheScenario) {
  const std::string reserved = fmt::format("(reserved: {})", fmt::join(harness_env_names(), ", "));
  EXPECT_EQ(error_of("name: a\nenv: {FAULTLINE_CONTROL_SECRET: stolen}\n"),
            "s.yaml:2:7: env.FAULTLINE_CONTROL_SECRET: FAULTLINE_CONTROL_SECRET is set by the "
            "harness for every rank and a scenario cannot set it " +
                reserved);
  EXPECT_EQ(
      error_of("name: a\ntopology: {ranks: 2}\nrank_env:\n  1: {FAULTLINE_EVENTS_FILE: /x}\n"),
      "s.yaml:4:7: rank_env.1.FAULTLINE_EVENTS_FILE: FAULTLINE_EVENTS_FILE is set by the "
      "harness for every rank and a scenario cannot set it " +
          reserved);
  LoadOptions o;
  o.overrides = {"env.FAULTLINE_RUN_ID=other"};
  EXPECT_NE(error_of("name: a\n", o)
                .find("env.FAULTLINE_RUN_ID: FAULTLINE_RUN_ID is set by the "
                      "harness"),
            std::string::npos);
  // Settings of the workers stay the scenario's to set.
  EXPECT_EQ(error_of("name: a\nenv: {FAULTLINE_SHM_TRANSPORT: \"1\", FAULTLINE_BACKEND: mpi}\n"),
            "no error");
}

TEST_F(ScenarioInput, VariableNamesAreCheckedAtLoadNotAtLaunch) {
  EXPECT_EQ(error_of("name: a\nenv: {\"A B\": x}\n"),
            "s.yaml:2:7: env.A B: 'A B' is not an environment variable name (allowed: letters, "
            "digits and '_', not starting with a digit)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - env: {set: {\"9X\": y}}\n"),
            "s.yaml:3:17: faults[0].env.set.9X: '9X' is not an environment variable name "
            "(allowed: letters, digits and '_', not starting with a digit)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - env: {unset: [\"X=1\"]}\n"),
            "s.yaml:3:19: faults[0].env.unset[0]: 'X=1' is not an environment variable name "
            "(allowed: letters, digits and '_', not starting with a digit)");
}

TEST_F(ScenarioInput, MpirunArgumentsAndValuesWithWhitespaceAreRefused) {
  EXPECT_EQ(error_of("name: a\ntopology: {launcher: mpirun}\n"
                     "workload: {args: [\"--seq-len\", \"16 32\"]}\n"),
            "s.yaml:3:32: workload.args[1]: '16 32' is empty or has whitespace or quotes, which "
            "launcher mpirun's app file would split into several words (allowed: one word per "
            "item, e.g. [\"--name\", \"value\"], or topology.launcher: local)");
  EXPECT_EQ(error_of("name: a\ntopology: {launcher: mpirun}\nenv: {NCCL_DEBUG: \"a b\"}\n"),
            "s.yaml:3:19: env.NCCL_DEBUG: 'a b' is empty or has whitespace or quotes, which "
            "launcher mpirun's app file cannot carry (allowed: a value without them, or "
            "topology.launcher: local)");
  EXPECT_NE(error_of("name: a\ntopology: {launcher: mpirun}\n"
                     "faults:\n  - env: {set: {X: \"it's\"}}\n")
                .find("faults[0].env.set.X: 'it's' is empty or has whitespace"),
            std::string::npos);
  // The local launcher passes argv words and values as they are.
  EXPECT_EQ(error_of("name: a\ntopology: {launcher: local}\n"
                     "workload: {args: [\"--seq-len\", \"16\"]}\nenv: {NCCL_DEBUG: \"a b\"}\n"),
            "no error");
}

// Open MPI's app-file reader takes '#' and '//' for the start of a comment; launch_mpirun.cpp puts
// a value every rank shares in mpirun's environment and refuses the rest at launch. The loader
// refuses the same, so `validate` catches it.
TEST_F(ScenarioInput, MpirunValuesWithACommentAreRefusedUnlessEveryRankShares) {
  const std::string mpirun = "name: a\ntopology: {launcher: mpirun, ranks: 2}\n";
  // Every rank's value (the artifact hub's kind of URL) goes in mpirun's own environment.
  EXPECT_EQ(error_of(mpirun + "env: {HUB: \"http://h:1/x#y\"}\n"), "no error");
  EXPECT_EQ(error_of(mpirun + "rank_env:\n  0: {HUB: a#b}\n  1: {HUB: a#b}\n"), "no error");
  // One rank's own value goes in its app-file line.
  EXPECT_EQ(error_of(mpirun + "rank_env:\n  1: {HUB: \"http://h\"}\n"),
            "s.yaml:4:12: rank_env.1.HUB: 'http://h' has '#' or '//', which launcher mpirun's app "
            "file cannot carry (Open MPI reads them as the start of a comment), and it is not "
            "every rank's value (rank 0 has none), so mpirun's own environment cannot carry it "
            "either (allowed: a value without them, one value for every rank, or "
            "topology.launcher: local)");
  EXPECT_NE(error_of(mpirun + "env: {HUB: a#b}\nrank_env:\n  1: {HUB: c}\n")
                .find("s.yaml:3:12: env.HUB: 'a#b' has '#' or '//', which launcher mpirun's app "
                      "file cannot carry (Open MPI reads them as the start of a comment), and it "
                      "is not every rank's value (rank 1's is 'c')"),
            std::string::npos);
  EXPECT_EQ(error_of(mpirun + "faults:\n  - env: {set: {X: \"#1\"}}\n"),
            "s.yaml:4:20: faults[0].env.set.X: '#1' has '#' or '//', which launcher mpirun's app "
            "file cannot carry (Open MPI reads them as the start of a comment; a fault's value "
            "goes in the rank's app-file line, only env's values every rank shares go in "
            "mpirun's own environment) (allowed: a value without them, or topology.launcher: "
            "local)");
  // Arguments are every rank's line, whatever they are.
  EXPECT_EQ(error_of(mpirun + "workload: {args: [\"--tag\", \"a#b\"]}\n"),
            "s.yaml:3:28: workload.args[1]: 'a#b' has '#' or '//', which launcher mpirun's app "
            "file cannot carry (Open MPI reads them as the start of a comment and the rank's "
            "line would end there) (allowed: an argument without them, or topology.launcher: "
            "local)");
  EXPECT_NE(error_of(mpirun + "faults:\n  - {args: [\"--url\", \"http://h\"], rank: 1}\n")
                .find("faults[0].args[1]: 'http://h' has '#' or '//'"),
            std::string::npos);
  EXPECT_NE(error_of(mpirun + "faults:\n  - {args: [\"--x\", \"a b\"]}\n")
                .find("faults[0].args[1]: 'a b' is empty or has whitespace or quotes"),
            std::string::npos);
  // The local launcher passes them as they are.
  EXPECT_EQ(error_of("name: a\ntopology: {launcher: local, ranks: 2}\nrank_env:\n  1: {HUB: "
                     "\"http://h\"}\nworkload: {args: [\"a#b\"]}\n"),
            "no error");
}

TEST_F(ScenarioInput, SettingExtendsIsAnError) {
  write("base.yaml", "name: base\nworkload: {steps: 9}\n");
  LoadOptions o;
  o.overrides = {"extends=base.yaml"};
  EXPECT_EQ(error_of("name: a\n", o),
            "--set 'extends=base.yaml': extends cannot be overridden (the bases are merged when "
            "the file is read, before --set applies); put extends: in the scenario file");
}

}  // namespace
}  // namespace fl::harness
