// Workload keys come from the workers' own declarations (`--describe-options`, compiled into the
// harness by the build): the schema's rows, and the flags a scenario's values become.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/launch/launch_args.hpp"
#include "harness/model/worker_options.hpp"
#include "harness/model/workload_kinds.hpp"

namespace fl::harness {
namespace {

// Two workers: train declares a section, an int, a flag with its negation, a list, an option
// passed always; infer shares the list.
const char* kJson = R"({
  "train": [
    {"key": "workload.zero", "type": "section", "help": "ZeRO"},
    {"key": "workload.zero.bucket", "type": "int", "help": "Bucket", "flag": "--bucket",
     "default": "0", "scenario_default": "0", "range": [0, 100]},
    {"key": "workload.zero.init", "type": "bool", "help": "Init", "flag": "", "flag_only": true,
     "negation": "--no-init", "default": "true", "scenario_default": "true"},
    {"key": "workload.plugins", "type": "list", "help": "Plugins", "flag": "--plugin",
     "default": "[]", "scenario_default": "[]"},
    {"key": "workload.device", "type": "string", "help": "Device", "flag": "--device",
     "default": "cpu", "scenario_default": "cpu", "choices": ["cpu", "cuda"], "always": true}
  ],
  "infer": [
    {"key": "workload.plugins", "type": "list", "help": "Plugins", "flag": "--plugin",
     "default": "[]", "scenario_default": "[]"}
  ]
})";

std::map<std::string, YAML::Node> values(const std::string& yaml) {
  std::map<std::string, YAML::Node> out;
  const YAML::Node doc = YAML::Load(yaml);
  for (auto it = doc.begin(); it != doc.end(); ++it) out[it->first.Scalar()] = it->second;
  return out;
}

TEST(WorkerOptionsTest, AValueAtTheWorkersOwnDefaultIsNotPassed) {
  const auto opts = parse_worker_options(kJson);
  EXPECT_EQ(worker_option_flags(opts, "train",
                                values("{workload.zero.bucket: 0, workload.zero.init: true, "
                                       "workload.plugins: [], workload.device: cpu}")),
            (std::vector<std::string>{"--device", "cpu"}));
}

TEST(WorkerOptionsTest, EachSetValueBecomesItsFlagAsTheWorkerDeclaredIt) {
  const auto opts = parse_worker_options(kJson);
  EXPECT_EQ(worker_option_flags(opts, "train",
                                values("{workload.zero.bucket: 4096, workload.zero.init: false, "
                                       "workload.plugins: [a, b], workload.device: cuda}")),
            (std::vector<std::string>{"--bucket", "4096", "--no-init", "--plugin", "a", "--plugin",
                                      "b", "--device", "cuda"}));
}

TEST(WorkerOptionsTest, OnlyTheKindsOwnWorkerGetsItsOptions) {
  const auto opts = parse_worker_options(kJson);
  EXPECT_EQ(worker_option_flags(opts, "infer",
                                values("{workload.zero.bucket: 4096, workload.plugins: [a]}")),
            (std::vector<std::string>{"--plugin", "a"}));
}

TEST(WorkerOptionsTest, AKeyTwoWorkersDeclareDifferentlyIsRefused) {
  const std::string json = R"({
    "train": [{"key": "workload.steps", "type": "int", "help": "", "flag": "--steps",
               "default": "20", "scenario_default": "20"}],
    "infer": [{"key": "workload.steps", "type": "int", "help": "", "flag": "--steps",
               "default": "8", "scenario_default": "8"}]})";
  try {
    parse_worker_options(json);
    FAIL() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(),
                 "workload.steps: declared differently by the train worker (int --steps, default "
                 "20) and the infer worker (int --steps, default 8): a key shared by workers must "
                 "mean the same");
  }
}

TEST(WorkerOptionsTest, TheSchemaHasTheTrainWorkersDeclarationOfAKnob) {
  const auto& schema = scenario_schema();
  const auto it = std::find_if(schema.begin(), schema.end(), [](const KeySpec& k) {
    return k.path == "workload.zero.reduce_bucket_size";
  });
  ASSERT_NE(it, schema.end());
  EXPECT_EQ(it->type, KeyType::kInt);
  EXPECT_EQ(it->default_value, "0");
  EXPECT_EQ(it->min, 0);
  EXPECT_EQ(it->max, 1e12);
  EXPECT_EQ(
      it->doc,
      "Gradient bucket in bytes (0: 1 MiB or the model if smaller); under the gemini reducer, "
      "GeminiDDP's chunk size");
}

TEST(WorkerOptionsTest, EveryBuiltWorkerDeclaresItsKeysTheSameWhereTheyShareThem) {
  // worker_options() throws on a disagreement; model and device are declared by both workers.
  const auto& all = worker_options();
  const auto model = std::find_if(all.begin(), all.end(),
                                  [](const WorkerOption& o) { return o.key == "workload.model"; });
  ASSERT_NE(model, all.end());
  EXPECT_EQ(model->kinds, (std::vector<std::string>{"train", "infer"}));
}

TEST(WorkloadKindsTest, AnUnknownKindNamesTheKnownOnes) {
  try {
    workload_kind("serve");
    FAIL() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_STREQ(e.what(), "workload.kind: unknown kind 'serve' (allowed: train, infer, command)");
  }
  EXPECT_TRUE(workload_kind("train").restartable);
  EXPECT_FALSE(workload_kind("infer").restartable);
  EXPECT_FALSE(workload_kind("command").own_worker());
}

}  // namespace
}  // namespace fl::harness
