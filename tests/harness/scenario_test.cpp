// Scenario loading: every kind of bad input gets one exact error naming file:line:col, the key
// path and what is allowed; extends / fix / --set merge as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "harness/faults/fault.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/scenario.hpp"
#include "tests/support/scenario_files.hpp"

namespace fl::harness {
namespace {

// The test's own folder and write() from the shared fixture; error_of here takes a whole file.
class ScenarioTest : public fl::test::ScenarioFiles {
 protected:
  ScenarioTest() : ScenarioFiles("scenario") {}
  std::string error_of(const std::string& text, LoadOptions o = {}) {
    const auto p = write("s.yaml", text);
    try {
      load_scenario(p, o);
    } catch (const ScenarioError& e) {
      std::string m = e.what();
      const auto at = m.find(p);
      return at == std::string::npos ? m : "s.yaml" + m.substr(at + p.size());
    }
    return "no error";
  }
};

TEST_F(ScenarioTest, MinimalScenarioGetsEveryDefault) {
  auto s = load_scenario(write("s.yaml", "name: a\n"));
  EXPECT_EQ(s.topo.ranks, 1);
  EXPECT_EQ(s.topo.launcher, "local");
  EXPECT_EQ(s.topo.backend, "mpi");
  EXPECT_EQ(s.workload.steps, 20);
  EXPECT_EQ(s.expect.oracle, "completed");
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.resolved["workload"]["data"]["drop_last"].as<bool>(), false);
}

TEST_F(ScenarioTest, ZeroKnobsReachTheWorkerArguments) {
  auto plain = worker_args(load_scenario(write("p.yaml", "name: a\n")), "/run", "");
  for (const char* flag : {"--no-zero-init", "--offload-optimizer", "--activation-checkpointing",
                           "--reduce-bucket-size", "--zero3-prefetch-bytes"}) {
    EXPECT_EQ(std::count(plain.begin(), plain.end(), flag), 0) << flag;
  }
  auto s = load_scenario(
      write("z.yaml",
            "name: a\ntopology: {ranks: 2, dp: 2, zero: 3}\nworkload:\n  activation_checkpointing: "
            "true\n  zero: {init: false, offload_optimizer: true, reduce_bucket_size: 4096,\n"
            "         allgather_bucket_size: 8192, prefetch_bytes: 0, max_live_bytes: 100000}\n"));
  auto a = worker_args(s, "/run", "");
  auto after = [&](const std::string& flag) {
    auto it = std::find(a.begin(), a.end(), flag);
    return it == a.end() || it + 1 == a.end() ? std::string("<absent>") : *(it + 1);
  };
  EXPECT_NE(std::find(a.begin(), a.end(), "--no-zero-init"), a.end());
  EXPECT_NE(std::find(a.begin(), a.end(), "--offload-optimizer"), a.end());
  EXPECT_NE(std::find(a.begin(), a.end(), "--activation-checkpointing"), a.end());
  EXPECT_EQ(after("--reduce-bucket-size"), "4096");
  EXPECT_EQ(after("--allgather-bucket-size"), "8192");
  EXPECT_EQ(after("--zero3-prefetch-bytes"), "0");
  EXPECT_EQ(after("--zero3-max-live-bytes"), "100000");
}

TEST_F(ScenarioTest, UnknownKeySuggestsTheNearestOne) {
  EXPECT_EQ(
      error_of("name: a\nworkload:\n  stepz: 3\n"),
      "s.yaml:3:3: workload.stepz: unknown key (did you mean 'steps'?) (allowed here: "
      "kind, fidelity, model, shape, device, plugins, jit, fetch, versions, steps, "
      "precision, micro_batch, grad_accum, grad_accum_dtype, grad_sync, train_batch_size, lr, "
      "clip, "
      "grad_norm, "
      "schedule, "
      "eval_every, "
      "loss_scale, "
      "min_loss_scale, loss_scale_window, hysteresis, raise_error_at_min_scale, optimizer, "
      "momentum, weight_decay, lr_scaling, warmup_steps, warmup_style, data, "
      "activation_checkpointing, freeze, pair_loss, "
      "zero, checkpoint, eval_data, ddp, structure, moe, tokenizer, infer, args, command, launch, "
      "probe, "
      "report_timeout_s)");
}

TEST_F(ScenarioTest, UnknownKeyWithoutANearOneListsWhatIsAllowed) {
  EXPECT_EQ(error_of("name: a\nexpect: {oracle: hang, colour: red}\n"),
            "s.yaml:2:24: expect.colour: unknown key (allowed here: symptom, oracle, absent, "
            "within_s, ranks, exit_class, exit_code, pattern, hang_s, op, group, factor, "
            "after_step, slowed, skipped, measure, of)");
}

// Issue 38: the versions a job sees are stated in the scenario; one that does not parse is
// refused at load, naming the key and the form allowed, before a worker could misread it.
TEST_F(ScenarioTest, AVersionThatDoesNotParseIsRefusedNamingTheKey) {
  EXPECT_EQ(error_of("name: a\nworkload: {versions: {torch_cuda: cu121}}\n"),
            "s.yaml:2:35: workload.versions.torch_cuda: 'cu121' is not a version (allowed: "
            "MAJOR.MINOR or MAJOR.MINOR.PATCH, digits, optionally +LOCAL (e.g. 12.1, "
            "2.1.0+cu121))");
  EXPECT_EQ(error_of("name: a\nworkload:\n  versions: {cached_extension: {torch: 2.x}}\n"),
            "s.yaml:3:40: workload.versions.cached_extension.torch: '2.x' is not a version "
            "(allowed: MAJOR.MINOR or MAJOR.MINOR.PATCH, digits, optionally +LOCAL (e.g. 12.1, "
            "2.1.0+cu121))");
  auto s = load_scenario(write("s.yaml",
                               "name: a\nworkload: {versions: {torch: 2.1.0+cu121, "
                               "cuda_toolkit: \"12.1\", cxx11_abi: false}}\n"));
  const auto args = worker_args(s, "/run", "");
  const auto at = std::find(args.begin(), args.end(), "--torch-version");
  ASSERT_NE(at, args.end());
  EXPECT_EQ(*(at + 1), "2.1.0+cu121");
  EXPECT_NE(std::find(args.begin(), args.end(), "--torch-cxx11-abi"), args.end());
}

// workload.tokenizer: the harness names the run's tokenizer folder to the ranks only when the job
// builds a tokenizer (harness/model/tokenizer_files.cpp writes it at the run's start).
TEST_F(ScenarioTest, ATokenizerTypeBringsTheRunsTokenizerFolder) {
  const auto dir_of = [&](const std::string& yaml) {
    const auto a = worker_args(load_scenario(write("t.yaml", yaml)), "/run", "");
    const auto it = std::find(a.begin(), a.end(), "--tokenizer-dir");
    return it == a.end() || it + 1 == a.end() ? std::string("<absent>") : *(it + 1);
  };
  EXPECT_EQ(dir_of("name: a\n"), "<absent>");
  EXPECT_EQ(dir_of("name: a\nworkload: {tokenizer: {type: none}}\n"), "<absent>");
  EXPECT_EQ(dir_of("name: a\nworkload: {tokenizer: {type: NullTokenizer, vocab_size: 63}}\n"),
            "/run/tokenizer");
}

TEST_F(ScenarioTest, NumericKeysThatContradictEachOtherAreRefused) {
  EXPECT_EQ(error_of("name: a\nworkload:\n  momentum: 0.9\n"),
            "s.yaml:3:13: workload.momentum: momentum 0.9 applies to optimizer: sgd or muon only "
            "(this workload uses adamw; allowed: 0, or optimizer: sgd or muon)");
  EXPECT_EQ(error_of("name: a\nworkload: {loss_scale: 4, min_loss_scale: 8}\n"),
            "s.yaml:2:43: workload.min_loss_scale: 8 is above loss_scale 4 (allowed: at most "
            "loss_scale)");
  EXPECT_EQ(error_of("name: a\nworkload: {hysteresis: -1}\n"),
            "s.yaml:2:24: workload.hysteresis: -1 is out of range (allowed 1-1000000)");
  auto s = load_scenario(write("s.yaml",
                               "name: a\nworkload: {optimizer: sgd, momentum: 0.9, lr_scaling: "
                               "sqrt, warmup_steps: 0, raise_error_at_min_scale: false}\n"));
  EXPECT_EQ(s.workload.get<std::string>("workload.optimizer"), "sgd");
  EXPECT_EQ(s.workload.get<double>("workload.momentum"), 0.9);
  EXPECT_EQ(s.workload.get<std::string>("workload.lr_scaling"), "sqrt");
  EXPECT_EQ(s.workload.get<int64_t>("workload.warmup_steps"), 0);
  EXPECT_FALSE(s.workload.get<bool>("workload.raise_error_at_min_scale"));
}

// Stop 55: a side run takes the run's topology and overrides part of it, so a layout changed by
// --set can leave prepare:'s or baseline:'s dp x tp x pp apart from its ranks; the loader says so
// at the side run's key instead of the run failing when it reaches the side run.
TEST_F(ScenarioTest, ASideRunWhoseLayoutNoLongerAddsUpIsRefusedAtItsKey) {
  const std::string text =
      "name: a\ntopology: {ranks: 2, tp: 2}\nworkload: {kind: infer}\n"
      "prepare:\n  topology: {dp: 2, tp: 1}\n  workload: {kind: train}\n";
  EXPECT_EQ(error_of(text), "no error");  // 2 ranks: dp 2 x tp 1 x pp 1
  LoadOptions o;
  o.overrides = {"topology.ranks=8", "topology.dp=2", "topology.pp=2"};
  EXPECT_EQ(error_of(text, o),
            "s.yaml:5:13: prepare.topology: the preparation run's layout is dp 2 x tp 1 x pp 2 = 4 "
            "but ranks is 8 (they must be equal; it takes the run's topology and overrides what "
            "prepare: sets)");
  o.overrides = {"topology.ranks=4", "topology.dp=2", "topology.tp=2", "prepare.topology.dp=4"};
  EXPECT_EQ(error_of(text, o), "no error");  // the side run's dp follows
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 2}\nexpect: {oracle: baseline, factor: 2}\n"
                     "baseline: {topology: {dp: 4}}\n"),
            "s.yaml:4:22: baseline.topology: the reference run's layout is dp 4 x tp 1 x pp 1 = 4 "
            "but ranks is 2 (they must be equal; it takes the run's topology and overrides what "
            "baseline: sets)");
  // A side run without a topology of its own has the run's layout: only the run's error, once
  // (the baseline oracle builds a reference run even without a baseline: key).
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 2, dp: 3}\nexpect: {oracle: baseline, factor: 2}\n"
                     "prepare: {workload: {steps: 2}}\n"),
            "s.yaml:2:11: topology: dp 3 x tp 1 x pp 1 = 3 but ranks is 2 (they must be equal)");
  // Under the deepspeed launcher the ranks come from the hostfile, not from topology.ranks.
  EXPECT_EQ(error_of("name: a\ntopology:\n  launcher: deepspeed\n  tp: 2\n  deepspeed:\n"
                     "    hostfile: |\n      worker-0 slots=2\n      worker-1 slots=2\n"
                     "prepare: {topology: {dp: 2, tp: 2}}\n"),
            "no error");
  EXPECT_EQ(error_of("name: a\ntopology:\n  launcher: deepspeed\n  tp: 2\n  deepspeed:\n"
                     "    hostfile: |\n      worker-0 slots=2\n      worker-1 slots=2\n"
                     "prepare: {topology: {dp: 4, tp: 2}}\n"),
            "s.yaml:9:21: prepare.topology: the preparation run's layout is dp 4 x tp 2 x pp 1 = 8 "
            "but ranks is 4 (they must be equal; it takes the run's topology and overrides what "
            "prepare: sets)");
}

TEST_F(ScenarioTest, WrongTypeOutOfRangeAndBadEnum) {
  EXPECT_EQ(error_of("name: a\ntopology:\n  ranks: four\n"),
            "s.yaml:3:10: topology.ranks: expected integer, got 'four'");
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 300}\n"),
            "s.yaml:2:19: topology.ranks: 300 is out of range (allowed 1-256)");
  EXPECT_EQ(error_of("name: a\ntopology: {launcher: torchrun}\n"),
            "s.yaml:2:22: topology.launcher: 'torchrun' is not allowed (allowed: auto, local, "
            "mpirun, command, srun, deepspeed)");
  EXPECT_EQ(error_of("name: a\nworkload: {data: {drop_last: maybe}}\n"),
            "s.yaml:2:30: workload.data.drop_last: expected true/false, got 'maybe'");
  EXPECT_EQ(error_of("name: a\nworkload: 3\n"),
            "s.yaml:2:11: workload: expected a map, got a scalar");
}

TEST_F(ScenarioTest, UnknownSymptomRootCauseAndFixPattern) {
  const std::string e = error_of("name: a\nexpect: {symptom: \"4.13\", oracle: hang}\n");
  EXPECT_EQ(e.substr(0, 62), "s.yaml:2:19: expect.symptom: unknown symptom id '4.13' (allowe");
  EXPECT_NE(e.find("4.11, 4.12, 5.1"), std::string::npos) << e;
  EXPECT_EQ(error_of("name: a\nreference: {fix_pattern: F9}\n").substr(0, 70),
            "s.yaml:2:26: reference.fix_pattern: unknown fix pattern 'F9' (allowed:");
}

TEST_F(ScenarioTest, AStandsForReferenceNamesAMechanismAndCitesNoThread) {
  auto s = load_scenario(write("s.yaml",
                               "name: a\nreference:\n  kind: stands-for\n  mechanism: \"ZeRO-1 "
                               "keeps full gradients\"\n  symptom: \"4.2\"\n  root_cause: "
                               "\"R4.5\"\n  fix_pattern: F5\n"));
  EXPECT_EQ(s.ref.kind, "stands-for");
  EXPECT_EQ(s.ref.mechanism, "ZeRO-1 keeps full gradients");
  EXPECT_EQ(s.ref.issue, "");
  EXPECT_EQ(s.ref.pr, "");
  EXPECT_EQ(s.ref.symptom, "4.2");
  EXPECT_EQ(s.ref.fix_pattern, "F5");
  // A thread next to the mechanism would read as a reproduction of it.
  EXPECT_EQ(error_of("name: a\nreference: {kind: stands-for, mechanism: m, issue: \"o/r#1\"}\n"),
            "s.yaml:2:52: reference.issue: a stands-for reference cites no thread (allowed with "
            "kind stands-for: kind, mechanism, symptom, root_cause, fix_pattern)");
  EXPECT_EQ(error_of("name: a\nreference: {kind: stands-for, mechanism: m, pr: \"o/r#1\"}\n"),
            "s.yaml:2:49: reference.pr: a stands-for reference cites no thread (allowed with "
            "kind stands-for: kind, mechanism, symptom, root_cause, fix_pattern)");
  EXPECT_EQ(error_of("name: a\nreference: {kind: stands-for, mechanism: m, thread: x}\n"),
            "s.yaml:2:45: reference.thread: unknown key (allowed here: kind, issue, pr, url, "
            "mechanism, symptom, root_cause, fix_pattern, needs)");
  // reference.needs names keys with a value (stop 47: what a triage draft must keep).
  EXPECT_EQ(error_of("name: a\nreference: {kind: stands-for, mechanism: m, needs: [topology]}\n"),
            "s.yaml:2:53: reference.needs[0]: 'topology' is not a key the mechanism can need "
            "(allowed: a key of the schema with a value, outside reference, e.g. topology.ranks)");
  EXPECT_EQ(
      error_of("name: a\nreference: {kind: stands-for, mechanism: m, needs: [topology.zero]}\n"),
      "no error");
  EXPECT_EQ(error_of("name: a\nreference: {kind: stands-for}\n"),
            "s.yaml:2:19: reference.mechanism: required with kind stands-for (allowed: a "
            "sentence naming the mechanism the scenario builds)");
  EXPECT_EQ(error_of("name: a\nreference: {kind: standsfor, mechanism: m}\n"),
            "s.yaml:2:19: reference.kind: 'standsfor' is not allowed (allowed: issue, pr, "
            "stands-for)");
}

TEST_F(ScenarioTest, ACitedThreadIsOneIssueOrOnePullRequestAndItsUrlLinksIt) {
  auto s = load_scenario(write("s.yaml",
                               "name: a\nreference: {pr: \"NVIDIA/Megatron-LM#5331\", url: "
                               "\"https://github.com/NVIDIA/Megatron-LM/pull/5331\"}\n"));
  EXPECT_EQ(s.ref.kind, "pr");
  EXPECT_EQ(s.ref.pr, "NVIDIA/Megatron-LM#5331");
  EXPECT_EQ(load_scenario(write("i.yaml", "name: a\nreference: {issue: \"o/r#7\"}\n")).ref.kind,
            "issue");
  EXPECT_EQ(load_scenario(write("n.yaml", "name: a\nreference: {symptom: \"4.2\"}\n")).ref.kind,
            "");
  // A pull request filed under issue: its /pull/ link gives it away.
  EXPECT_EQ(error_of("name: a\nreference:\n  issue: \"NVIDIA/Megatron-LM#5331\"\n  url: "
                     "\"https://github.com/NVIDIA/Megatron-LM/pull/5331\"\n"),
            "s.yaml:4:8: reference.url: 'https://github.com/NVIDIA/Megatron-LM/pull/5331' does "
            "not link issue NVIDIA/Megatron-LM#5331 (allowed: "
            "https://github.com/NVIDIA/Megatron-LM/issues/5331)");
  EXPECT_EQ(error_of("name: a\nreference: {issue: \"DeepSpeed 629\"}\n"),
            "s.yaml:2:20: reference.issue: 'DeepSpeed 629' is not OWNER/NAME#NUMBER (allowed: "
            "e.g. deepspeedai/DeepSpeed#2223)");
  EXPECT_EQ(error_of("name: a\nreference: {issue: \"o/r#1\", pr: \"o/r#2\"}\n"),
            "s.yaml:2:33: reference.pr: a reference cites one thread (allowed: issue or pr, not "
            "both)");
  EXPECT_EQ(error_of("name: a\nreference: {issue: \"o/r#1\", mechanism: m}\n"),
            "s.yaml:2:40: reference.mechanism: only a stands-for reference names a mechanism "
            "(allowed: kind: stands-for with it, or a cited issue or pr without it)");
  EXPECT_EQ(error_of("name: a\nreference: {kind: pr, issue: \"o/r#1\"}\n"),
            "s.yaml:2:19: reference.pr: required with kind pr (allowed: OWNER/NAME#NUMBER)");
  EXPECT_EQ(error_of("name: a\nreference: {url: \"https://example.org/x\"}\n"),
            "s.yaml:2:18: reference.url: a link needs the thread it links (allowed: with "
            "reference.issue or reference.pr)");
}

TEST_F(ScenarioTest, LayoutMustMatchTheRanks) {
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 4, dp: 1, tp: 2}\n"),
            "s.yaml:2:11: topology: dp 1 x tp 2 x pp 1 = 2 but ranks is 4 (they must be equal)");
  auto s = load_scenario(write("ok.yaml", "name: a\ntopology: {ranks: 8, tp: 2, pp: 2}\n"));
  EXPECT_EQ(s.topo.dp, 2);
}

TEST_F(ScenarioTest, FaultsAreCheckedIncludingThePlanGrammar) {
  const std::string e =
      error_of("name: a\nfaults:\n  - plan: \"comm.all_reduce[rank=1]=50%frob\"\n");
  EXPECT_EQ(e.substr(0, 37), "s.yaml:3:11: faults[0].plan: plan: at") << e;
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {signal: STOP, plan: x}\n"),
            "s.yaml:3:5: faults[0]: names two faults, plan and signal (one per item; add another "
            "item)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {rank: 0}\n"),
            "s.yaml:3:5: faults[0]: names no fault (one of: plan, signal, env, port_squat, file, "
            "restart, disk_full, memory_limit, cpu_quota, network, args, hide, launcher, shm)");
  // The launch layer's kinds: their values are checked where they are written.
  EXPECT_EQ(error_of("name: a\nfaults:\n  - launcher: {starts: twice}\n"),
            "s.yaml:3:24: faults[0].launcher.starts: 'twice' is not allowed (allowed: one, node)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - launcher: {devices: uuid}\n"),
            "s.yaml:3:25: faults[0].launcher.devices: 'uuid' is not allowed (allowed: int, cuda)");
  EXPECT_EQ(
      error_of("name: a\ntopology: {launcher: mpirun}\nfaults:\n  - launcher: {starts: node}\n"),
      "s.yaml:4:24: faults[0].launcher.starts: starts: node needs topology.launcher: local "
      "(under mpirun the extra processes would share their launcher's MPI rank)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - shm: {size: 100}\n"),
            "s.yaml:3:17: faults[0].shm.size: 100 bytes is below one page (allowed: 4k or more)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - shm: {size: lots}\n").substr(0, 30),
            "s.yaml:3:17: faults[0].shm.siz");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - shm: {size: 64m}\n    at: step\n"),
            "s.yaml:4:9: faults[0].at: shm faults are in place from launch (allowed: launch, or "
            "leave `at` out)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {signal: HUPP, rank: 0}\n"),
            "s.yaml:3:14: faults[0].signal: 'HUPP' is not allowed (allowed: STOP, CONT, KILL, "
            "TERM, SEGV, ABRT, INT)");
}

TEST_F(ScenarioTest, OutOfProcessFaultKeysAreChecked) {
  EXPECT_EQ(error_of("name: a\nfaults:\n  - file: {path: /etc/passwd, action: delete}\n"),
            "s.yaml:3:18: faults[0].file.path: '/etc/passwd' must be a path inside the run "
            "directory (relative, without '..')");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - file: {path: ../x}\n"),
            "s.yaml:3:18: faults[0].file.path: '../x' must be a path inside the run directory "
            "(relative, without '..')");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {memory_limit: 12q, rank: 0}\n"),
            "s.yaml:3:20: faults[0].memory_limit: '12q' is not a size (allowed: a positive number "
            "of bytes with an optional k, m or g suffix, from 1 byte to 1 PiB)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {memory_limit: 1g}\n"),
            "s.yaml:3:5: faults[0].rank: a memory limit needs a rank (0 or more)");
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 4, nodes: 2}\nfaults:\n"
                     "  - network: {node: 2}\n"),
            "s.yaml:4:21: faults[0].network.node: node 2 does not exist (allowed 0-1; "
            "topology.nodes is 2)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - network: {action: drop}\n"),
            "s.yaml:3:14: faults[0].network: cutting links needs topology.nodes >= 2 (or store: "
            "true)");
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 2, nodes: 2, launcher: mpirun}\nfaults:\n"
                     "  - network: {action: reject}\n"),
            "s.yaml:4:14: faults[0].network: network faults need topology.launcher: local or "
            "command (mpirun starts every rank in one network namespace), or topology.hosts");
  auto s = load_scenario(write("ok.yaml",
                               "name: a\ntopology: {ranks: 4, nodes: 2}\nfaults:\n"
                               "  - network: {action: bandwidth, node: 1, rate: 2mbit}\n"
                               "    at: launch\n  - disk_full: {size: 1m}\n"));
  ASSERT_EQ(s.faults.oop.size(), 2u);
  EXPECT_EQ(s.topo.network, "namespaces");
  EXPECT_EQ(s.faults.oop[0]->kind, "network");
  EXPECT_EQ(s.faults.oop[0]->params()["rate"], "2mbit");
  EXPECT_EQ(s.faults.oop[0]->at, faults::When::kLaunch);
  EXPECT_EQ(s.faults.oop[1]->kind, "disk_full");
  EXPECT_EQ(s.faults.oop[1]->params()["size_bytes"], 1 << 20);
  EXPECT_EQ(s.faults.oop[1]->params()["path"], "checkpoints");
}

TEST_F(ScenarioTest, AFaultItemNamesOneKindAndATimeItCanHappenAt) {
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {signal: KILL, hide: libx.so, rank: 0}\n"),
            "s.yaml:3:5: faults[0]: names two faults, signal and hide (one per item; add another "
            "item)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {signal: KILL, rank: 0, at: exit}\n"),
            "s.yaml:3:33: faults[0].at: signal faults cannot happen at 'exit' (allowed: step)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {env: {set: {A: b}}, at: step}\n"),
            "s.yaml:3:30: faults[0].at: env faults are in place from launch (allowed: launch, or "
            "leave `at` out)");
  EXPECT_EQ(error_of("name: a\nfaults:\n  - {hide: libfl_fused_adamw.so, restart: true}\n"),
            "s.yaml:3:43: faults[0].restart: hide faults are in place from launch; `restart` goes "
            "with a timed fault (signal, file, network, restart)");
  // A file fault with restart: true restarts after the damage; restart alone is its own kind.
  auto s = load_scenario(write("ok.yaml",
                               "name: a\nfaults:\n  - {file: {path: x}, restart: true, at: exit}\n"
                               "  - {restart: true, step: 3}\n  - {port_squat: false}\n"));
  ASSERT_EQ(s.faults.oop.size(), 2u);
  EXPECT_EQ(s.faults.oop[0]->kind, "file");
  EXPECT_TRUE(s.faults.oop[0]->restart);
  EXPECT_EQ(s.faults.oop[0]->at, faults::When::kExit);
  EXPECT_EQ(s.faults.oop[1]->kind, "restart");
  EXPECT_EQ(s.faults.oop[1]->step, 3);
  EXPECT_EQ(s.faults.oop[1]->at, faults::When::kStep);
}

TEST_F(ScenarioTest, EveryFaultKindsKeysAreInTheSchema) {
  std::set<std::string> paths;
  for (const auto& k : scenario_schema()) paths.insert(k.path);
  for (const auto* kind : faults::fault_kinds()) {
    EXPECT_TRUE(paths.count("faults[]." + kind->key())) << kind->key();
    for (const auto& k : kind->keys()) EXPECT_TRUE(paths.count(k.path)) << k.path;
  }
  EXPECT_TRUE(paths.count("faults[].at"));
}

TEST_F(ScenarioTest, YamlSyntaxErrorsCarryThePosition) {
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 2\n"),
            "s.yaml:3:1: YAML syntax: end of map flow not found");
}

TEST_F(ScenarioTest, ExtendsMergesMapsAndTheVariantNamesItself) {
  write("base.yaml",
        "name: base\ntopology: {ranks: 4, dp: 4}\nworkload: {steps: 9, data: {samples: 66}}\n");
  auto s = load_scenario(write("v.yaml",
                               "name: variant\nextends: base.yaml\nworkload: {data: {drop_last: "
                               "true}}\n"));
  EXPECT_EQ(s.name, "variant");
  EXPECT_EQ(s.topo.ranks, 4);
  EXPECT_EQ(s.workload.steps, 9);
  EXPECT_EQ(s.workload.get<int64_t>("workload.data.samples"), 66);
  EXPECT_TRUE(s.workload.get<bool>("workload.data.drop_last"));
  write("loop.yaml", "name: l\nextends: loop.yaml\n");
  EXPECT_THROW(load_scenario((dir_ / "loop.yaml").string()), ScenarioError);
}

TEST_F(ScenarioTest, FixAndOverridesApplyLast) {
  const auto p = write("s.yaml",
                       "name: a\nexpect: {oracle: hang, symptom: \"4.11\"}\nfix: {workload: "
                       "{data: {drop_last: true}}, expect: {oracle: completed, symptom: \"\"}}\n");
  auto plain = load_scenario(p);
  EXPECT_TRUE(plain.has_fix);
  EXPECT_EQ(plain.expect.oracle, "hang");
  auto fixed = load_scenario(p, {true, {"workload.steps=3"}});
  EXPECT_EQ(fixed.expect.oracle, "completed");
  EXPECT_TRUE(fixed.workload.get<bool>("workload.data.drop_last"));
  EXPECT_EQ(fixed.workload.steps, 3);
  try {
    load_scenario(p, {false, {"workload.stpes=3"}});
    FAIL();
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("workload.stpes: unknown key (did you mean 'steps'?)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_scenario(p, {false, {"workload.steps=many"}}), ScenarioError);
}

TEST_F(ScenarioTest, FixCannotRenameTheScenarioAndRankEnvNeedsRealRanks) {
  EXPECT_EQ(error_of("name: a\nfix: {name: b}\n"),
            "s.yaml:2:7: fix.name: cannot be overridden by a fix");
  EXPECT_EQ(error_of("name: a\ntopology: {ranks: 2}\nrank_env: {\"5\": {X: \"1\"}}\n"),
            "s.yaml:3:12: rank_env: rank 5 does not exist (allowed 0-1)");
}

TEST_F(ScenarioTest, EveryShippedScenarioValidates) {
  size_t n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(FAULTLINE_SOURCE_DIR "/scenarios")) {
    if (e.path().extension() != ".yaml" || e.path().filename() == "taxonomy.yaml" ||
        e.path().filename() == "catalog.yaml") {
      continue;
    }
    if (e.path().parent_path().filename() == "suites") continue;
    EXPECT_NO_THROW(load_scenario(e.path().string())) << e.path();
    ++n;
  }
  EXPECT_GE(n, 2u);
}

TEST(Taxonomy, HasTheStudysCounts) {
  const auto& t = taxonomy();
  EXPECT_EQ(t.symptoms.size(), 34u);
  EXPECT_EQ(t.root_causes.size(), 28u);
  EXPECT_EQ(t.fix_patterns.size(), 6u);
}

TEST_F(ScenarioTest, PrepareIsAFaultFreeRunOfTheSameScenarioWithItsOverrides) {
  auto s = load_scenario(write("s.yaml", R"y(name: srv
topology: {ranks: 2, tp: 2}
workload: {kind: infer, checkpoint: {resume: true}}
faults:
  - args: ["--requests", "6"]
    rank: 1
expect: {symptom: "5.1", oracle: error_signature, pattern: x}
prepare:
  topology: {dp: 2, tp: 1}
  workload: {kind: train, steps: 4, checkpoint: {every: 4, resume: false}}
)y"));
  ASSERT_EQ(s.faults.oop.size(), 1u);
  EXPECT_EQ(s.faults.oop[0]->kind, "args");
  EXPECT_EQ(s.faults.oop[0]->params()["args"], (std::vector<std::string>{"--requests", "6"}));
  ASSERT_FALSE(s.side_runs.prepare_yaml.empty());
  auto p = load_scenario(write("p.yaml", s.side_runs.prepare_yaml));
  EXPECT_EQ(p.name, "srv-prepare");
  EXPECT_EQ(p.workload.kind, "train");
  EXPECT_EQ(p.topo.tp, 1);
  EXPECT_EQ(p.topo.dp, 2);
  EXPECT_EQ(p.workload.checkpoint_every, 4);
  EXPECT_FALSE(p.workload.resume);
  EXPECT_TRUE(p.faults.oop.empty());
  EXPECT_EQ(p.expect.oracle, "completed");
  EXPECT_TRUE(p.side_runs.prepare_yaml.empty());
}

TEST_F(ScenarioTest, PrepareAndFetchErrorsNameTheKey) {
  EXPECT_EQ(error_of("name: a\nprepare: {prepare: {}}\n"),
            "s.yaml:2:11: prepare.prepare: cannot be overridden by prepare");
  EXPECT_EQ(error_of("name: a\nprepare: {workload: {stepz: 3}}\n").substr(0, 59),
            "s.yaml:2:22: prepare.workload.stepz: unknown key (did you m");
  EXPECT_EQ(error_of("name: a\nworkload: {fetch: [weights.bin]}\n"),
            "s.yaml:2:20: workload.fetch: unknown artifact 'weights.bin' (the hub serves: "
            "tokenizer.json)");
}

// launcher srun without topology.hosts: Slurm picks each rank's node at launch. Faults the node's
// agent can apply anyway load (every node's agent prepares, the rank's node's acts); those that
// need the rank's node before launch are refused naming the fault and the launcher.
TEST_F(ScenarioTest, SrunWithoutHostsRefusesWhatNeedsTheRanksNodeBeforeLaunch) {
  const std::string srun = "name: a\ntopology: {ranks: 2, launcher: srun}\nfaults:\n";
  const std::string why =
      "cannot go through the agents with topology.launcher: srun and no topology.hosts: Slurm "
      "picks the rank's node only at launch, and ";
  const std::string allowed =
      " (allowed: add topology.hosts, whose hosts land on the allocation's nodes, or use launcher "
      "local or mpirun)";
  EXPECT_EQ(error_of(srun + "  - shm: {size: 1m}\n"),
            "s.yaml:4:10: faults[0].shm: shm " + why +
                "each rank's command must enter the mount namespace its node's agent holds "
                "(nsenter with that agent's pid) before it starts" +
                allowed);
  EXPECT_EQ(error_of(srun + "  - {hide: libfl_kernels_cpu.so, rank: 1}\n"),
            "s.yaml:4:12: faults[0].hide: hide " + why +
                "the rank's plugin directory is made by its node's agent before the rank "
                "starts" +
                allowed);
  EXPECT_EQ(error_of(srun + "  - {disk_full: {size: 1m}, rank: 1}\n"),
            "s.yaml:4:35: faults[0].rank: disk_full on one rank " + why +
                "a filesystem mounted on every node would fill the other ranks' disks too (leave "
                "rank out for every node)" +
                allowed);
  EXPECT_EQ(error_of(srun + "  - {file: {path: x}, rank: 1, at: exit}\n"),
            "s.yaml:4:36: faults[0].at: file on one rank at exit " + why +
                "its node's agent is found through the running rank (allowed: at: step, or leave "
                "rank out)" +
                allowed);
  EXPECT_EQ(error_of(srun + "  - {memory_limit: 1g, rank: 0, device_arena: 64m}\n"),
            "s.yaml:4:47: faults[0].device_arena: a device arena is not supported with "
            "topology.hosts or launcher srun (the harness would hold it on its own machine); "
            "leave device_arena out");
  // What the node's agent applies loads: cgroups (every node's agent makes one, the rank's node's
  // takes the rank), a disk_full on every node, a file found through the running rank.
  const auto s = load_scenario(write(
      "ok.yaml", srun + "  - {memory_limit: 1g, rank: 1}\n  - {cpu_quota: 0.5, rank: 0, step: 2}\n"
                        "  - disk_full: {size: 1m}\n  - {file: {path: x}, rank: 1, step: 2}\n"
                        "  - {signal: KILL, rank: 1, step: 3}\n"));
  EXPECT_EQ(s.faults.oop.size(), 5u);
  // With hosts the rank's node is known before launch: shm and hide load under srun.
  EXPECT_EQ(load_scenario(write("hosts.yaml",
                                "name: a\ntopology: {ranks: 2, launcher: srun, hosts: [a]}\n"
                                "faults:\n  - shm: {size: 1m}\n  - {disk_full: {}, rank: 1}\n"))
                .faults.oop.size(),
            2u);
}

}  // namespace
}  // namespace fl::harness
