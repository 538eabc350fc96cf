// faultline triage's "what it read": the environment rules of env.yaml on real report excerpts
// (ds_report, colossalai check, command lines, DeepSpeed's configuration printout, prose).
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "harness/triage/config_paths.hpp"
#include "harness/triage/triage.hpp"
#include "tests/triage/tables.hpp"

namespace fl::triage {
namespace {

using test::run;

using Fact = std::pair<std::string, size_t>;  // the value read, and its line

// key -> what triage read for it from `text`.
std::map<std::string, Fact> facts(const std::string& text) {
  std::map<std::string, Fact> got;
  for (const auto& e : run(text).env) got[e.key] = {e.value, e.line};
  return got;
}

// What triage read from `line` beside an error line (so that it answers).
std::map<std::string, Fact> read(const std::string& line) {
  return facts(line + "\nRuntimeError: NCCL error\n");
}

// Each key of `want` read from `text` as given (other keys may be read too).
void expect_facts(const std::string& text, const std::map<std::string, Fact>& want) {
  const auto got = facts(text);
  for (const auto& [key, fact] : want) {
    const auto it = got.find(key);
    EXPECT_TRUE(it != got.end() && it->second == fact)
        << key << ": want '" << fact.first << "' from line " << fact.second << ", read "
        << (it == got.end()
                ? std::string("nothing")
                : "'" + it->second.first + "' from line " + std::to_string(it->second.second));
  }
}

// Verbatim env_lines of the corpus: DeepSpeed#6540 (ds_report) and ColossalAI#2384
// (colossalai check), both in the tune split.
TEST(TriageEnvironment, ReadsVersionsFromDsReportAndColossalAiCheck) {
  auto got = facts(
      "torch version .................... 2.3.1+cu121\n"
      "deepspeed info ................... 0.15.1, unknown, unknown\n"
      "deepspeed wheel compiled w. ...... torch 2.3\n"
      "Colossal-AI version: 0.2.0\n"
      "PyTorch Version: 1.10.0\n"
      "System CUDA Version: 11.8\n");
  EXPECT_EQ(got["torch"], Fact("2.3.1+cu121", 1));
  EXPECT_EQ(got["deepspeed"], Fact("0.15.1", 2));
  EXPECT_EQ(got["colossalai"], Fact("0.2.0", 4));
  EXPECT_EQ(got["cuda"], Fact("11.8", 6));
}

TEST(TriageEnvironment, ReadsTheLauncherAndLayoutOfACommandLine) {
  auto got = facts(
      "deepspeed --num_nodes 2 --num_gpus 4 --hostfile myhostfile pretrain_gpt2.py\n"
      "  \"stage\": 3,\n"
      "  \"device\": \"cpu\",\n");
  EXPECT_EQ(got["launcher"], Fact("deepspeed", 1));
  EXPECT_EQ(got["nodes"], Fact("2", 1));
  EXPECT_EQ(got["gpus_per_node"], Fact("4", 1));
  EXPECT_EQ(got["zero_stage"], Fact("3", 2));
  EXPECT_EQ(got["offload"], Fact("cpu", 3));
}

// DeepSpeed's engine prints its configuration at start-up, a "name ..... value" line per
// setting, switched-off precisions included: the lines read are the ones set, not the names.
TEST(TriageEnvironment, ReadsDeepSpeedsConfigurationPrintoutByItsValues) {
  const std::string p = "[2024-07-10 14:14:51,801] [INFO] [config.py:1000:print]   ";
  auto got = facts(
      "[2024-07-10 14:14:50,382] [INFO] [logging.py:96:log_dist] [Rank 0] Creating "
      "torch.float16 ZeRO stage 3 optimizer\n" +
      p + "bfloat16_enabled ............. False\n" +  //
      p + "fp16_enabled ................. True\n" +   //
      p + "world_size ................... 4\n" +      //
      p + "zero_config .................. stage=3 offload_optimizer=" +
      "DeepSpeedZeroOffloadOptimizerConfig(device='cpu', nvme_path=None)\n" + p +
      "zero_optimization_stage ...... 3\n");
  EXPECT_EQ(got["precision"], Fact("float16", 1));
  EXPECT_EQ(got["zero_stage"], Fact("3", 1));
  EXPECT_EQ(got["world_size"], Fact("4", 4));
  EXPECT_EQ(got["offload"], Fact("cpu", 5));
  // Without the "Creating" line, the printout's own lines name them.
  got = facts(p + "bfloat16_enabled ............. False\n" + p +
              "fp16_enabled ................. True\n" + p + "zero_optimization_stage ...... 2\n");
  EXPECT_EQ(got["precision"], Fact("fp16", 2));
  EXPECT_EQ(got["zero_stage"], Fact("2", 3));
}

// The value read for `key` from `text`, or "(none)".
std::string value_of(const std::string& text, const std::string& key) {
  auto got = facts(text);
  return got.count(key) ? got[key].first : std::string("(none)");
}

// A precision switched off, or left to the trainer ("auto"), is not the run's precision; the
// one set is read from a later line.
TEST(TriageEnvironment, APrecisionSwitchedOffIsNotRead) {
  EXPECT_EQ(
      value_of("\"fp16\": {\"enabled\": false}, \"bf16\": {\"enabled\": true}\n", "precision"),
      "bf16");
  EXPECT_EQ(
      value_of("\"fp16\": {\"enabled\": false},\n\"bf16\": {\"enabled\": \"auto\"}\n", "precision"),
      "(none)");
  // Switched off on the next line of a config dump (the line that names it does not say).
  EXPECT_EQ(value_of("  \"fp16\": {\n    \"enabled\": false\n  }\n", "precision"), "(none)");
  EXPECT_EQ(value_of("fp16=False, bf16=True\n", "precision"), "bf16");
  EXPECT_EQ(value_of("deepspeed train.py --bf16 False --fp16 True\n", "precision"), "fp16");
  EXPECT_EQ(value_of("{'bf16': {'enabled': False}, 'fp16': {'enabled': True}}\n", "precision"),
            "fp16");
  EXPECT_EQ(value_of("'bf16': False, 'fp16': True\n", "precision"), "fp16");
  EXPECT_EQ(value_of("fp16:\n  enabled: false\n", "precision"), "(none)");
}

// A precision and ZeRO's stage stated in prose or on a command line are read.
TEST(TriageEnvironment, PrecisionsAndZeroStagesInProseAreRead) {
  EXPECT_EQ(value_of("bf16 no longer overflows after the fix\n", "precision"), "bf16");
  EXPECT_EQ(value_of("python pretrain_gpt.py --tensor-model-parallel-size 2 --bf16\n", "precision"),
            "bf16");
  EXPECT_EQ(value_of("I train with ZeRO stage 3 and bf16 on 8 GPUs\n", "zero_stage"), "3");
  EXPECT_EQ(value_of("deepspeed zero-stage 2 hangs\n", "zero_stage"), "2");
  EXPECT_EQ(value_of("when I use zero stage3 the loss is nan\n", "zero_stage"), "3");
}

// Megatron-LM prints its arguments the same way, "  name ..... value", in alphabetical order:
// `bf16 ..... False` before `fp16 ..... True`.
TEST(TriageEnvironment, ReadsMegatronsArgumentPrintoutByItsValues) {
  auto got = facts(
      "------------------------ arguments ------------------------\n"
      "  bf16 ............................................ False\n"
      "  data_parallel_size .............................. 2\n"
      "  fp16 ............................................ True\n"
      "  pipeline_model_parallel_size .................... 2\n"
      "  tensor_model_parallel_size ...................... 4\n"
      "  world_size ...................................... 16\n"
      "-------------------- end of arguments ---------------------\n");
  EXPECT_EQ(got["precision"], Fact("fp16", 4));
  EXPECT_EQ(got["dp"], Fact("2", 3));
  EXPECT_EQ(got["pp"], Fact("2", 5));
  EXPECT_EQ(got["tp"], Fact("4", 6));
  EXPECT_EQ(got["world_size"], Fact("16", 7));
}

// The key paths of `text`'s configs, as "line: path: value".
std::vector<std::string> paths_of(const std::string& text, size_t max_paths = 100) {
  std::vector<std::string> out;
  for (const auto& p : config_paths(text, max_paths))
    out.push_back(std::to_string(p.line) + ": " + p.text);
  return out;
}

using Paths = std::vector<std::string>;

// A DeepSpeed config as issues paste it (pretty-printed JSON), one inline level and an array.
TEST(TriageConfigPaths, ReadsAPrettyPrintedJsonConfigByItsKeyPaths) {
  EXPECT_EQ(
      paths_of("{\n"
               "  \"train_batch_size\": 16,\n"
               "  \"fp16\": {\n"
               "    \"enabled\": true,\n"
               "    \"loss_scale\": 0\n"
               "  },\n"
               "  \"zero_optimization\": {\n"
               "    \"stage\": 3,\n"
               "    \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true},\n"
               "    \"betas\": [0.9, 0.999]\n"
               "  }\n"
               "}\n"),
      (Paths{"2: train_batch_size: 16", "4: fp16.enabled: true", "5: fp16.loss_scale: 0",
             "8: zero_optimization.stage: 3", "9: zero_optimization.offload_optimizer.device: cpu",
             "9: zero_optimization.offload_optimizer.pin_memory: true"}));
}

// A Python dict printed over lines, opened on a line of code; a line that is not the config's
// ends it, so the next config's paths do not carry the first one's levels.
TEST(TriageConfigPaths, ALineOutsideTheConfigEndsIt) {
  EXPECT_EQ(paths_of("ds_config = {\n"
                     "    'bf16': {\n"
                     "        'enabled': True,\n"
                     "Traceback (most recent call last):\n"
                     "    \"stage\": 2\n"),
            (Paths{"3: ds_config.bf16.enabled: True", "5: stage: 2"}));
  // A log's bracketed prefixes and prose quotes give no path and leave no level open.
  EXPECT_EQ(paths_of("[2024-07-10 14:14:51,801] [INFO] [config.py:1000:print] can't read 'x'\n"
                     "[rank0]: {'loss': 2.5, 'lr': [1e-05]}\n"),
            (Paths{"2: loss: 2.5"}));
}

TEST(TriageConfigPaths, IsBoundedInDepthAndCount) {
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "{\"k\": ";
  deep += "1\n\"stage\": 3\n";
  EXPECT_EQ(paths_of(deep), (Paths{"2: stage: 3"}));  // the 17th level dropped them all
  std::string many;
  for (int i = 0; i < 50; ++i) many += "\"a\": " + std::to_string(i) + ",\n";
  EXPECT_EQ(config_paths(many, 7).size(), 7u);
  // Only the paths kept count: a trainer's logged dicts do not use up the limit.
  std::string log;
  for (int i = 0; i < 50; ++i) log += "{'loss': 2.5, 'grad_norm': 0.3}\n";
  log += "\"zero_optimization\": {\"stage\": 3}\n";
  const auto kept = config_paths(
      log, 7, [](const std::string& p) { return p.find("stage") != std::string::npos; });
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].text, "zero_optimization.stage: 3");
}

// Comments in a pasted Python dict: a comment line keeps the levels; a comment after a value
// is not part of it.
TEST(TriageConfigPaths, CommentsAreNotTheConfigs) {
  EXPECT_EQ(paths_of("ds_config = {\n"
                     "    'zero_optimization': {\n"
                     "        # offload to the host\n"
                     "        'stage': 3,  # ZeRO-3\n"
                     "        'contiguous_gradients': True // on\n"
                     "    },\n"
                     "}\n"),
            (Paths{"4: ds_config.zero_optimization.stage: 3",
                   "5: ds_config.zero_optimization.contiguous_gradients: True"}));
}

// env.yaml's `nested: true` rules read those paths: the precision switched on, ZeRO's stage and
// the optimizer's offload, each with the line that holds its value.
TEST(TriageEnvironment, ReadsAConfigPrintedOverSeveralLines) {
  auto got = facts(
      "deepspeed --num_gpus 4 train.py --deepspeed ds_config.json\n"
      "{\n"
      "  \"bf16\": {\n"
      "    \"enabled\": false\n"
      "  },\n"
      "  \"fp16\": {\n"
      "    \"enabled\": true\n"
      "  },\n"
      "  \"zero_optimization\": {\n"
      "    \"stage\": 2,\n"
      "    \"offload_param\": {\n"
      "      \"device\": \"nvme\"\n"
      "    },\n"
      "    \"offload_optimizer\": {\n"
      "      \"device\": \"cpu\"\n"
      "    }\n"
      "  }\n"
      "}\n");
  EXPECT_EQ(got["precision"], Fact("fp16", 7));
  EXPECT_EQ(got["zero_stage"], Fact("2", 10));
  // The parameters' device came first, but it is not the optimizer's.
  EXPECT_EQ(got["offload"], Fact("cpu", 15));
  // Without an optimizer offload, the parameters' device is not read as one.
  EXPECT_EQ(value_of("\"zero_optimization\": {\n  \"stage\": 3,\n  \"offload_param\": {\n"
                     "    \"device\": \"nvme\"\n  }\n}\n",
                     "offload"),
            "(none)");
  // A pipeline's "stage" is no ZeRO stage; the one stated later is read.
  EXPECT_EQ(
      value_of("\"pipeline\": {\n  \"stage\": 1\n}\nwith ZeRO stage 2 it hangs\n", "zero_stage"),
      "2");
  // A stored excerpt without its parent line still gives the stage.
  EXPECT_EQ(value_of("  \"stage\": 3,\n", "zero_stage"), "3");
  // A precision named in prose before the config is read first, as ever.
  EXPECT_EQ(
      value_of("the loss goes nan with bf16\n\"fp16\": {\n  \"enabled\": true\n}\n", "precision"),
      "bf16");
}

// A model named with its size, in the families the corpus's reports name.
TEST(TriageEnvironment, ReadsTheModelAndItsSize) {
  const std::pair<const char*, const char*> cases[] = {
      {"--model_name_or_path facebook/opt-1.3b --fp16", "opt-1.3b"},
      {"loading bigscience/bloom-560m", "bloom-560m"},
      {"bigscience/bloom-7b1 on 2 nodes", "bloom-7b1"},
      {"EleutherAI/gpt-j-6b with zero3", "gpt-j-6b"},
      {"python pretrain_gpt.py --load gpt2_345m", "gpt2_345m"},
      {"Qwen/Qwen3-30B-A3B hangs", "Qwen3-30B"},
      {"Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B"},
      {"mistralai/Mixtral-8x7B-v0.1", "Mixtral-8x7B"},
      {"tiiuae/falcon-40b", "falcon-40b"},
      {"deepseek-ai/DeepSeek-R1-671B", "DeepSeek-R1-671B"},
      {"meta-llama/Llama-2-7b-hf", "Llama-2-7b"},
      // An option or a script is not a model.
      {"--optimizer adam --opt-level O2 pretrain_gpt.py", "(none)"}};
  for (const auto& [line, model] : cases)
    EXPECT_EQ(value_of(std::string(line) + "\n", "model"), model) << line;
}

// PyTorch's collect_env (the issue template's), then nvidia-smi's header: the toolkit PyTorch was
// built with is the CUDA read, not the newest one the driver supports; NCCL from the pip list.
TEST(TriageEnvironment, ReadsCollectEnvBeforeNvidiaSmi) {
  const std::string smi =
      "| NVIDIA-SMI 535.129.03    Driver Version: 535.129.03   CUDA Version: 12.2     |\n";
  expect_facts(
      "PyTorch version: 2.1.0+cu121\n"
      "CUDA used to build PyTorch: 12.1\n"
      "GPU 0: NVIDIA H100 80GB HBM3\n"
      "Nvidia driver version: 535.129.03\n"
      "[conda] nvidia-nccl-cu12          2.18.1                   pypi_0    pypi\n" +
          smi,
      {{"torch", {"2.1.0+cu121", 1}},
       {"cuda", {"12.1", 2}},
       {"gpu", {"NVIDIA H100", 3}},
       {"driver", {"535.129.03", 4}},
       {"nccl", {"2.18.1", 5}},
       {"driver_cuda", {"12.2", 6}}});
  // nvidia-smi pasted first: its CUDA is still the driver's, the toolkit's comes after.
  expect_facts(smi + "CUDA runtime version: 12.1.105\n",
               {{"cuda", {"12.1", 2}}, {"driver_cuda", {"12.2", 1}}});
  // ds_report's lines.
  EXPECT_EQ(value_of("torch cuda version ............... 11.8\n", "cuda"), "11.8");
  EXPECT_EQ(value_of("nvcc version ..................... 12.1\n", "cuda"), "12.1");
  EXPECT_EQ(value_of("nvidia-nccl-cu11==2.14.3\n", "nccl"), "2.14.3");
}

// Slurm's, Open MPI's and accelerate's own options give the layout.
TEST(TriageEnvironment, ReadsTheLayoutFromSrunMpirunAndAccelerateOptions) {
  auto got = read("srun -p gpu --exclusive -N 4 --ntasks-per-node=1 python train.py");
  EXPECT_EQ(got["launcher"].first, "srun");
  EXPECT_EQ(got["nodes"].first, "4");
  EXPECT_EQ(got.count("gpus_per_node"), 0u);  // one task per node that starts torchrun
  // The program's own options are not srun's or mpirun's.
  got = read("srun python train.py --nodes 4");
  EXPECT_EQ(got.count("nodes"), 0u);
  got = read("mpirun -np $NP python train.py -n 3");
  EXPECT_EQ(got.count("world_size"), 0u);
  got = read("mpirun --mca btl ^openib -x NCCL_DEBUG=INFO --np 2 ./all_reduce_perf -b 8");
  EXPECT_EQ(got["world_size"].first, "2");
  got = read("srun --nodes=2 --gpus-per-node=8 python train.py");
  EXPECT_EQ(got["nodes"].first, "2");
  EXPECT_EQ(got["gpus_per_node"].first, "8");
  got = read("mpirun --allow-run-as-root -np 16 -H node1:8,node2:8 python train.py");
  EXPECT_EQ(got["launcher"].first, "mpirun");
  EXPECT_EQ(got["world_size"].first, "16");
  got = read("accelerate launch --num_processes 8 --num_machines 2 --multi_gpu train.py");
  EXPECT_EQ(got["launcher"].first, "accelerate");
  EXPECT_EQ(got["world_size"].first, "8");
  EXPECT_EQ(got["nodes"].first, "2");
  // accelerate's config file (`accelerate config`), as reports paste it.
  expect_facts(
      "compute_environment: LOCAL_MACHINE\n"
      "deepspeed_config:\n"
      "  offload_optimizer_device: cpu\n"
      "  zero_stage: 2\n"
      "mixed_precision: bf16\n"
      "num_machines: 1\n"
      "num_processes: 4\n",
      {{"offload", {"cpu", 3}},
       {"zero_stage", {"2", 4}},
       {"precision", {"bf16", 5}},
       {"nodes", {"1", 6}},
       {"world_size", {"4", 7}}});
  // `accelerate env`: the same keys as a list, the DeepSpeed part a dict on one line.
  expect_facts(
      "- `Accelerate` version: 0.27.2\n"
      "\t- num_processes: 8\n"
      "\t- num_machines: 2\n"
      "\t- deepspeed_config: {'gradient_accumulation_steps': 1, "
      "'offload_optimizer_device': 'cpu', 'zero_stage': 3}\n",
      {{"world_size", {"8", 2}},
       {"nodes", {"2", 3}},
       {"offload", {"cpu", 4}},
       {"zero_stage", {"3", 4}}});
}

// The GPUs and nodes a report states in prose (corpus env_lines: DeepSpeed#5394's "using 4 V100",
// and the forms the corpus's reports use). A count sits next to a GPU's name; "per node" and
// "each" make it the GPUs of one node; "2 * 8 H800" is 2 nodes of 8.
TEST(TriageEnvironment, ReadsGpusAndNodesStatedInProse) {
  struct Case {
    std::string line;
    std::map<std::string, std::string> want;  // key -> value; "" for a key not read
  };
  const std::vector<Case> cases = {
      {"I am trying to train Llama2-7B-fp16 using 4 V100.",
       {{"gpus", "4"}, {"gpu", "V100"}, {"gpus_per_node", ""}}},
      {"zero3 with latest 0.9.2 to train 8gpus in one node", {{"gpus", "8"}}},
      {"GPU 40G*A100*8", {{"gpus", "8"}}},
      {"Training on 2x A100 80GB", {{"gpus", "2"}}},
      // 8 per node is not 8 in all.
      {"I'm doing multi-node training (8 nodes, 8 gpu's each, NCCL 2.18)",
       {{"nodes", "8"}, {"gpus_per_node", "8"}, {"gpus", ""}}},
      {"* cluster: 2 nodes, A100*8 for each node", {{"nodes", "2"}, {"gpus_per_node", "8"}}},
      {"2 * 8 H800 , Distributed model", {{"nodes", "2"}, {"gpus_per_node", "8"}, {"gpus", ""}}},
      {"- Hardware: 4xH200", {{"gpus", "4"}, {"gpu", "H200"}}},
      {"8 A100-SXM4-80GB per node", {{"gpus_per_node", "8"}, {"gpus", ""}}},
      {"A100*8 each, and 8 GPUs/node elsewhere", {{"gpus_per_node", "8"}, {"gpus", ""}}},
      {"16 H100 nodes", {{"nodes", "16"}, {"gpus", ""}}},
      {"on 2 node 8 x H800", {{"nodes", "2"}}},
      {"2 x 8 A100", {{"nodes", "2"}, {"gpus_per_node", "8"}, {"gpus", ""}}},
      {"Hardware: Multi-node (e.g., 2 nodes x 8 GPUS)",
       {{"nodes", "2"}, {"gpus_per_node", "8"}, {"gpus", ""}}},
      {"I used NCCL latest code to test A100 * 2 nodes.", {{"nodes", "2"}, {"gpus", ""}}},
      // Not counts of GPUs: a memory size, a version, a device index, a rank, a range of nodes.
      {"torch 2.0 GPU with 80GB A100, GPU 0: Tesla P100-SXM2-16GB, cuda:1 gpu",
       {{"gpus", ""}, {"gpu", "A100"}}},
      {"Rank 0 GPU memory is full; later using 8 GPUs", {{"gpus", "8"}}},
      {"When tp={2} and pp={2,4} on 1-2 nodes, the script hangs", {{"nodes", ""}}},
  };
  for (const auto& c : cases) {
    const auto got = read(c.line);
    for (const auto& [key, value] : c.want) {
      const auto it = got.find(key);
      EXPECT_EQ(it == got.end() ? "" : it->second.first, value) << key << " of: " << c.line;
    }
  }
}

// The GPUs collect_env and nvidia-smi list (corpus env_lines have both): their number, from the
// last line that added one; nvidia-smi's process rows and a repeated index add none.
TEST(TriageEnvironment, CountsTheGpusCollectEnvAndNvidiaSmiList) {
  expect_facts(
      "GPU models and configuration:\n"
      "GPU 0: Tesla V100-SXM2-16GB\n"
      "GPU 1: Tesla V100-SXM2-16GB\n"
      "GPU 0: Tesla V100-SXM2-16GB\n"
      "Nvidia driver version: 535.129.03\n",
      {{"gpus_listed", {"2", 3}}});
  expect_facts(
      "| NVIDIA-SMI 535.129.03    Driver Version: 535.129.03   CUDA Version: 12.2     |\n"
      "|   0  NVIDIA H100 80GB HBM3          On  | 00000000:18:00.0 Off |                    0 |\n"
      "| N/A   34C    P0    71W / 700W |      0MiB / 81559MiB |      0%      Default |\n"
      "|   1  NVIDIA H100 80GB HBM3          On  | 00000000:2A:00.0 Off |                    0 |\n"
      "|    0   N/A  N/A     12345      C   python                        1234MiB |\n"
      "|    2   N/A  N/A      1234      C   nvidia-cuda-mps-server          30MiB |\n",
      {{"gpus_listed", {"2", 4}}});
  EXPECT_EQ(read("GPU 0: the loss is nan on rank 3\n").count("gpus_listed"), 0u);
  // Names without "NVIDIA": older drivers and tables, and other product lines.
  expect_facts("GPU 0: TITAN V\nGPU 1: A100-SXM4-40GB\nGPU 2: L40S\nGPU 3: HGX GB200\n",
               {{"gpus_listed", {"4", 4}}});
  expect_facts(
      "|   0  GeForce GTX TIT...  Off  | 0000:03:00.0     Off |                  N/A |\n"
      "|   1  Quadro RTX 8000     Off  | 00000000:3B:00.0 Off |                  Off |\n",
      {{"gpus_listed", {"2", 2}}});
}

// A `count` rule gives its key only when no other rule of the key read a line, wherever that line
// is; `count` with `nested` is refused.
TEST(TriageSignatures, ACountRuleGivesWayToALineThatStatesItsKey) {
  const auto dir =
      test::write_scratch_table("fl_triage_env_test_", "count_rule",
                                "env:\n"
                                "  - {key: gpus, needle: gpu, regex: 'GPU (\\d+):', count: lines}\n"
                                "  - {key: gpus, needle: using, regex: 'using (\\d+) GPUs'}\n");
  const Tables t = load_tables(dir, default_taxonomy_path());
  const auto gpus = [&](const std::string& text) {
    std::istringstream in(text);
    const Result r = triage(read_input(in, 1u << 20), t);
    for (const auto& f : r.env)
      if (f.key == "gpus") return f.value + "@" + std::to_string(f.line);
    return std::string("none");
  };
  EXPECT_EQ(gpus("GPU 0: a\nGPU 1: b\nGPU 5: c\n"), "3@3");
  EXPECT_EQ(gpus("GPU 0: a\nGPU 1: b\nusing 8 GPUs\n"), "8@3");
  EXPECT_EQ(gpus("no list here\n"), "none");
  const std::pair<const char*, const char*> refused[] = {
      {"nested: true, count: lines", "2:72: count: not with nested"},
      {"count: true", "2:58: count: 'true' (allowed: lines, items)"},
      {"count: ''", "2:58: count: '' (allowed: lines, items)"},
      {"count: [lines]", "2:58: count: must be a string (allowed: lines, items)"}};
  for (const auto& [keys, error] : refused) {
    const auto bad = test::write_scratch_table(
        "fl_triage_env_test_", "count_refused",
        std::string("env:\n  - {key: gpus, needle: gpu, regex: 'gpu: (\\d+)', ") + keys + "}\n");
    EXPECT_EQ(test::load_error(bad), bad + "/t.yaml:" + error) << keys;
  }
}

// The GPUs a job was given on one machine: CUDA_VISIBLE_DEVICES (as a shell, Python or a launcher
// prints it) and the DeepSpeed launcher's --include for one host, by their number of items.
TEST(TriageEnvironment, CountsTheGpusMadeVisibleToAJob) {
  const std::pair<const char*, const char*> cases[] = {
      {"CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nnodes 1 train.py", "4"},
      {"export CUDA_VISIBLE_DEVICES=6,7", "2"},
      {"os.environ[\"CUDA_VISIBLE_DEVICES\"] = \"2\"", "1"},
      {"os.environ['CUDA_VISIBLE_DEVICES'] = '0, 1, 2'", "3"},
      {"deepspeed --include localhost:4,5,6,7 train.py --deepspeed ds.json", "4"},
      {"deepspeed --include=localhost:2 train.py", "1"},
      // Several hosts, or no device named: no count of one machine's GPUs.
      {"deepspeed --include node1:0,1@node2:0,1 train.py", "(none)"},
      {"CUDA_VISIBLE_DEVICES= python train.py", "(none)"}};
  for (const auto& [line, gpus] : cases)
    EXPECT_EQ(value_of(std::string(line) + "\n", "gpus_visible"), gpus) << line;
}

// An env rule's `needle` may list the words that announce its regex: one row per needle, in order,
// each with the rule's key and regex. A line is read by whichever of its needles it holds.
TEST(TriageSignatures, AnEnvRulesNeedleListIsOneRowPerNeedle) {
  const auto dir = test::write_scratch_table(
      "fl_triage_env_test_", "needle_list",
      "env:\n"
      "  - {key: gpus, needle: [GPU, v100], regex: '(\\d+) (?:GPUs|V100)'}\n"
      "  - {key: nodes, needle: node, regex: '(\\d+) nodes'}\n");
  const Tables t = load_tables(dir, default_taxonomy_path());
  ASSERT_EQ(t.env_rules.size(), 3u);
  EXPECT_EQ(t.env_rules[0].needle, "gpu");  // lower-cased: a needle ignores case
  EXPECT_EQ(t.env_rules[1].needle, "v100");
  EXPECT_EQ(t.env_rules[2].needle, "node");
  EXPECT_EQ(t.env_rules[0].key, t.env_rules[1].key);
  for (const char* text : {"we train on 4 V100\n", "we train on 4 GPUs\n"}) {
    std::istringstream in(text);
    const Result r = triage(read_input(in, 1u << 20), t);
    ASSERT_EQ(r.env.size(), 1u) << text;
    EXPECT_EQ(r.env[0].key, "gpus");
    EXPECT_EQ(r.env[0].value, "4");
  }
}

TEST(TriageSignatures, ABadNeedleListNamesFileLineColumnAndWhatIsAllowed) {
  const std::string rule = "env:\n  - {key: gpus, regex: '(\\d+) GPUs', needle: ";
  const struct {
    const char* needle;
    const char* error;
  } cases[] = {
      {"[gpu, v]}", "2:52: needle: at least 2 characters"},
      {"[]}", "2:46: needle: the list is empty"},
      {"[gpu, GPU]}", "2:52: needle: 'gpu' is already in this rule's list"},
      {"[gpu, [v100]]}", "2:52: needle: each entry must be a string"},
      {"{a: b}}", "2:46: needle: must be a string or a list of strings"},
  };
  for (const auto& c : cases) {
    const auto dir =
        test::write_scratch_table("fl_triage_env_test_", "bad_needle", rule + c.needle + "\n");
    EXPECT_EQ(test::load_error(dir), dir + "/t.yaml:" + c.error) << c.needle;
  }
}

}  // namespace
}  // namespace fl::triage
