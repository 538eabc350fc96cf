// fl-infer: sharded inference worker. Loads weights from a training checkpoint (any DP size or
// ZeRO stage; its TP/PP must match) or the seeded initial weights, serves `calls` generate()
// calls on one engine, each for a batch of prompts taken from the synthetic corpus, and reports
// how often the continuation follows the corpus's most likely transition (a trained model
// should, an untrained one does not). Each call's tokens go to the history (a `generation`
// event) and, with --tokens-file, to a JSONL file: what the baseline oracle's `measure: tokens`
// compares with a reference run's.
#include <xxhash.h>

#include <cstdio>
#include <fstream>

#include "kernels/versions.hpp"
#include "workloads/infer/auto_tp.hpp"
#include "workloads/infer/engine.hpp"
#include "workloads/infer/load.hpp"
#include "workloads/infer/meta_load.hpp"
#include "workloads/rendezvous/artifacts.hpp"
#include "workloads/runtime/runtime.hpp"
#include "workloads/telemetry/telemetry.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/data.hpp"

namespace {

using namespace fl;

struct InferArgs {
  model::Layout layout;
  infer::GenerateConfig g;
  std::string checkpoint, checkpoint_json, load_mode = "sharded";
  int requests = 4, prompt_len = 4, vocab = 0, calls = 1;
  uint64_t prompt_seed = 4242;
  std::string cache_reset = "generate", seed_offset = "none", tokens_file;
  int window = 0;  // the model's sliding attention window (0: none)
  std::string engine = "static";
  bool repeat_prompts = false;
  // How init_inference shards the model (auto_tp.hpp).
  std::string injection = "megatron", model_class = "gpt2";
  std::vector<std::string> injection_policy;
  bool meta_tensor = false;  // the model is built on the meta device (meta_load.hpp)
  std::string checkpoint_keys = "bare";
};

// The window the engine's attention kernel gets: the model's, except in Megatron's dynamic
// batching engine before Megatron Core 0.19.0, whose flash-attention calls hard-coded
// window_size (-1, -1) (NVIDIA/Megatron-LM pull request 5138; the fix landed as pull request 5249,
// first tagged core_v0.19.0): every layer of a sliding-window model then attended to the whole
// context there, where the static engine applied the window.
int attention_window(const InferArgs& a) {
  if (a.engine == "dynamic" && ops::stated_and_older(ops::job_versions().megatron, 0, 19, 0)) {
    return 0;
  }
  return a.window;
}

// How DeepSpeed's init_inference shards the model across the tensor-parallel ranks.
void declare_injection_options(worker::Options& o, InferArgs& a) {
  o.add("workload.infer.injection", "--injection", a.injection,
        "How the model is sharded: megatron (the GPT's own tensor parallelism, no "
        "init_inference), kernel (replace_with_kernel_inject: the model class's container "
        "policy), autotp (kernel injection off, no policy: DeepSpeed's AutoTP parses the "
        "modules, by workload.versions.deepspeed's rules) or policy (injection_policy)")
      .choices({"megatron", "kernel", "autotp", "policy"});
  o.add("workload.infer.model_class", "--model-class", a.model_class,
        "The architecture whose module structure the served GPT has for init_inference (its "
        "printout, module names and types): gpt2, gpt_neox, llama, opt, megatron_gpt or bloom")
      .choices({"gpt2", "gpt_neox", "llama", "opt", "megatron_gpt", "bloom"});
  o.add("workload.infer.injection_policy", "--injection-policy", a.injection_policy,
        "injection_policy's Linear names for the model class's decoder layer (injection "
        "policy): these become row-parallel (all-reduced), the others column-parallel; e.g. "
        "self_attn.o_proj and mlp.down_proj for llama");
  o.add_flag("workload.infer.meta_tensor", "--meta-tensor", a.meta_tensor,
             "The model is built on the meta device (deepspeed.OnDevice(device='meta'), "
             "DeepSpeedExamples' --use_meta_tensor): only the loader of workload.infer.injection "
             "and workload.versions.deepspeed fills its modules from checkpoint_json; a module "
             "left on meta fails the first copy (NotImplementedError: Cannot copy out of meta "
             "tensor), and from DeepSpeed 0.12.6 a first parameter left on meta makes the engine "
             "give every parameter uninitialized memory (to_empty)");
  o.add("workload.infer.checkpoint_keys", "--checkpoint-keys", a.checkpoint_keys,
        "How the checkpoint's state-dict keys name an OPT or BLOOM model's modules, which the "
        "meta loader of kernel injection matches: bare (below the causal-LM wrapper: opt-350m's "
        "decoder.*, bigscience/bloom's h.*) or wrapped (with the wrapper's attribute: "
        "opt-125m's model.decoder.*, BLOOM fine-tunes' transformer.*)")
      .choices({"bare", "wrapped"});
}

// The meta model's loading and its move to the device (meta_load.hpp); true when to_empty left
// every parameter uninitialized.
bool load_meta(const InferArgs& a, const infer::InjectionChoice& choice, int layers, int rank) {
  infer::MetaCheckpoint ckpt;
  ckpt.wrapped_keys = a.checkpoint_keys == "wrapped";
  if (ckpt.wrapped_keys && a.injection != "kernel") {
    raise<ConfigError>(
        "workload.infer.checkpoint_keys wrapped is modelled for kernel injection's meta loader "
        "only (workload.infer.injection kernel; this job: {}): AutoTP's loader's key names are "
        "not modelled",
        a.injection);
  }
  if (ckpt.wrapped_keys && a.model_class != "opt" && a.model_class != "bloom") {
    raise<ConfigError>(
        "workload.infer.checkpoint_keys wrapped is for model_class opt or bloom (this job: {}), "
        "whose files come both ways; the others' files keep their wrapper's name, as their "
        "loaders do",
        a.model_class);
  }
  if (!a.checkpoint_json.empty() && a.injection != "megatron") {
    const auto d = infer::read_checkpoint_description(a.checkpoint_json);
    ckpt.type = d.type;
    ckpt.parallelization = d.parallelization;
  }
  const auto m = infer::load_meta_model(choice, layers, ckpt);
  const std::string line = infer::move_meta_model(m);
  if (rank == 0) std::printf("init_inference: %s\n", line.c_str());
  return m.to_empty;
}

// How each position's token is chosen and where the tokens go.
void declare_sampling_options(worker::Options& o, InferArgs& a) {
  o.add("workload.infer.top_k", "--top-k", a.g.top_k,
        "Sample among the k most likely tokens (0 with top_p 1: greedy)")
      .range(0, 1000000);
  o.add("workload.infer.top_p", "--top-p", a.g.top_p,
        "Sample among the most likely tokens whose probability reaches p (1: off)")
      .range(0, 1);
  o.add("workload.infer.temperature", "--temperature", a.g.temperature,
        "Sampling temperature (logits divided by it)")
      .range(1e-3, 1000);
  o.add("workload.infer.seed", "--seed", a.g.seed,
        "Sampling seed (0: the scenario's `seed`, which the harness passes as --seed; a scenario "
        "may not set another)")
      .scenario_default("0");
  o.add("workload.infer.seed_offset", "--seed-offset", a.seed_offset,
        "Added to the sampling seed on each rank: none, dp_rank (replicas draw differently, "
        "tensor-parallel ranks alike, as Megatron's per-DP-rank seed) or rank (every rank its "
        "own, as a training script's set_seed(seed + rank): tensor-parallel ranks then draw "
        "different tokens)")
      .choices({"none", "dp_rank", "rank"});
  o.add("workload.infer.eos", "--eos", a.g.eos,
        "Token that ends a request (padded with it after); a call stops once every request has "
        "ended (-1: none)")
      .range(-1, 1000000);
  o.add("workload.infer.tokens_file", "--tokens-file", a.tokens_file,
        "JSONL file (relative to the rank's directory) that gets each call's tokens: {\"call\", "
        "\"rank\", \"prompt_len\", \"tokens\": [[...] per request]} (\"\": none)")
      .scenario_default("generations.jsonl");
}

void declare_infer_options(worker::Runtime& rt, InferArgs& a) {
  rt.add_model_options();
  rt.add_runtime_options();
  a.g.max_new_tokens = 12;
  auto& o = rt.options();
  o.section("workload.infer", "Inference workload (kind: infer)");
  o.add("workload.infer.requests", "--requests", a.requests, "Batched requests").range(1, 4096);
  o.add("workload.infer.prompt_len", "--prompt-len", a.prompt_len, "Prompt tokens per request")
      .range(1, 4096)
      .scenario_default("8");
  o.add("workload.infer.new_tokens", "--new-tokens", a.g.max_new_tokens,
        "Tokens to generate (with prompt_len, within the context: tiny 16, small 64; "
        "context_limit decides what a request past it does)")
      .range(1, 4096)
      .scenario_default("8");
  o.add("workload.infer.load", "--load", a.load_mode,
        "How each rank loads the checkpoint: sharded (only its own shard files) or full (the "
        "whole checkpoint into host memory, charged to the host budget, then its shard kept)")
      .choices({"sharded", "full"});
  o.add("workload.infer.checkpoint_json", "--checkpoint-json", a.checkpoint_json,
        "DeepSpeed init_inference's checkpoint=: a JSON description of the checkpoint's files "
        "('type', 'checkpoints', 'version', optional 'base_dir'; relative to the rank's "
        "directory; fl-ckpt describe writes one) instead of a checkpoint folder (\"\": none)");
  o.add("workload.infer.calls", "--calls", a.calls,
        "generate() calls served by one engine, one after another")
      .range(1, 4096);
  o.add_flag("workload.infer.repeat_prompts", "--repeat-prompts", a.repeat_prompts,
             "Every call serves the first call's prompts again (else each call takes the next "
             "`requests` prompts of the corpus)");
  o.add("workload.infer.cache_reset", "--cache-reset", a.cache_reset,
        "When the engine empties its KV cache: generate (at the start of every call, as HF "
        "generate, vLLM and DeepSpeed since PR 2669 do), prompt (only for a forward call of more "
        "than one token, as DeepSpeed's kernels did before: a one-token prompt continues the "
        "previous call's cache) or never (every call continues the previous one's positions)")
      .choices({"generate", "prompt", "never"});
  o.add("workload.infer.window", "--attention-window", a.window,
        "The model's sliding attention window (gpt-oss: 128 positions, each attending to the "
        "last `window` ones); 0: full attention")
      .range(0, 1e9);
  o.add("workload.infer.engine", "--engine", a.engine,
        "The serving engine: static, or dynamic (Megatron's dynamic batching engine, whose "
        "attention calls passed full attention whatever the model's window before Megatron Core "
        "0.19.0, workload.versions.megatron)")
      .choices({"static", "dynamic"});
  o.add("workload.infer.context_limit", "--context-limit", a.g.context_limit,
        "A prompt plus new_tokens past the context: refuse (an error before the first forward), "
        "clamp (generate up to the context, with a warning, as HF's max_length) or none (no "
        "check: generation fails at the position embedding's end, mid-call)")
      .choices({"refuse", "clamp", "none"});
  declare_sampling_options(o, a);
  declare_injection_options(o, a);
  auto& app = rt.app();
  app.add_option("--vocab", a.vocab, "Override the vocabulary size");
  app.add_option("--tp", a.layout.tp, "Tensor-parallel size");
  app.add_option("--pp", a.layout.pp, "Pipeline-parallel size");
  app.add_option("--dp", a.layout.dp, "Replicas (each serves the same batch)");
  app.add_option("--checkpoint", a.checkpoint, "Load weights from this checkpoint");
  app.add_option("--prompt-seed", a.prompt_seed, "Seed of the corpus the prompts are drawn from");
}

// The weights this rank serves: a checkpoint's shards (its TP x PP must be this server's) or the
// seeded initial ones.
std::vector<float> load_weights(const InferArgs& a, const model::GptConfig& cfg,
                                const parallel::Topology& topo, const model::ParamLayout& pl) {
  std::vector<float> params(pl.total());
  if (!a.checkpoint.empty() && !a.checkpoint_json.empty()) {
    raise<ConfigError>(
        "--checkpoint {} and workload.infer.checkpoint_json (--checkpoint-json) {} name the "
        "weights twice (allowed: one of them, as init_inference takes one checkpoint=)",
        a.checkpoint, a.checkpoint_json);
  }
  if (a.checkpoint.empty() && a.checkpoint_json.empty()) {
    pl.initialize(params.data(), cfg.seed);
    return params;
  }
  const std::string dir = a.checkpoint_json.empty()
                              ? train::resolve_checkpoint(a.checkpoint)
                              : infer::read_checkpoint_description(a.checkpoint_json).dir;
  auto m = train::read_manifest(dir);
  train::check_compatible(dir, m, cfg);
  const auto& l = m.at("layout");
  if (l.at("tp").get<int>() != a.layout.tp || l.at("pp").get<int>() != a.layout.pp) {
    raise<CheckpointError>(
        "checkpoint {} is partitioned tp {} x pp {}; this server is tp {} x "
        "pp {}: shards of another partitioning cannot be loaded",
        dir, l.at("tp").get<int>(), l.at("pp").get<int>(), a.layout.tp, a.layout.pp);
  }
  return infer::load_inference_weights(dir, m, topo.tp_rank, topo.pp_rank, pl.total(), a.load_mode,
                                       MemoryAccountant::host());
}

// The batch of call `call`: `requests` prompts of `prompt_len` tokens from the synthetic corpus
// (the next ones for each call, or the first call's again with repeat_prompts).
std::vector<std::vector<int32_t>> make_prompts(const InferArgs& a, const model::GptConfig& cfg,
                                               int call) {
  train::SyntheticCorpus corpus(cfg.vocab, cfg.seq_len, 1 << 20, a.prompt_seed);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> in(static_cast<size_t>(cfg.seq_len)), tgt(in.size());
  const int first = a.repeat_prompts ? 0 : call * a.requests;
  for (int r = 0; r < a.requests; ++r) {
    corpus.sample(first + r, in.data(), tgt.data());
    prompts.emplace_back(in.begin(), in.begin() + a.prompt_len);
  }
  return prompts;
}

// The sampling seed of this rank (seed_offset).
uint64_t rank_seed(const InferArgs& a, const parallel::Topology& topo) {
  if (a.seed_offset == "rank") return a.g.seed + static_cast<uint64_t>(topo.rank);
  if (a.seed_offset == "dp_rank") return a.g.seed + static_cast<uint64_t>(topo.dp_rank);
  return a.g.seed;
}

// One call's tokens: a `generation` event (the history, which the baseline oracle reads) and a
// line of the tokens file.
void report_call(const InferArgs& a, int call, int rank,
                 const std::vector<std::vector<int32_t>>& out) {
  const nlohmann::json d = {{"call", call}, {"prompt_len", a.prompt_len}, {"tokens", out}};
  // A history event holds up to 1 MiB of data: a larger call keeps its tokens to the file.
  size_t tokens = 0;
  for (const auto& o : out) tokens += o.size();
  if (tokens <= 100000) {
    telemetry::emit("generation", d);
  } else {
    telemetry::emit("generation",
                    {{"call", call}, {"prompt_len", a.prompt_len}, {"tokens_left_out", tokens}});
  }
  if (a.tokens_file.empty()) return;
  std::ofstream f(a.tokens_file, std::ios::app);
  nlohmann::json line = d;
  line["rank"] = rank;
  f << line.dump() << "\n";
  if (!f) raise<Error>("cannot write the tokens file {}", a.tokens_file);
}

// What this rank produced over every call (an output event the harness compares across ranks).
void report_output(const std::vector<std::vector<std::vector<int32_t>>>& calls) {
  std::vector<int32_t> flat;
  for (auto& out : calls) {
    for (auto& o : out) flat.insert(flat.end(), o.begin(), o.end());
  }
  const auto digest = XXH64(flat.data(), flat.size() * sizeof(int32_t), 0);
  telemetry::emit("output",
                  {{"what", "tokens"},
                   {"digest", fmt::format("{:016x}", static_cast<unsigned long long>(digest))},
                   {"group", "all"}});
}

// Rank 0 prints every request ("call C " before it after the first call) and how often the
// continuation follows the corpus's most likely transition.
void print_generations(const std::vector<std::vector<std::vector<int32_t>>>& calls,
                       const InferArgs& a, const model::GptConfig& cfg) {
  const auto prompt_len = static_cast<size_t>(a.prompt_len);
  int follows = 0, total = 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    const auto& out = calls[c];
    for (auto& o : out) {
      for (size_t i = prompt_len; i < o.size(); ++i) {
        follows += o[i] == (o[i - 1] * 7 + 3) % cfg.vocab;  // the chain's most likely successor
        ++total;
      }
    }
    for (size_t r = 0; r < out.size(); ++r) {
      if (c > 0) std::printf("call %zu ", c);
      std::printf("request %zu:", r);
      for (size_t i = 0; i < out[r].size(); ++i) {
        std::printf("%s%d", i == prompt_len ? " |" : " ", out[r][i]);
      }
      std::printf("\n");
    }
  }
  std::printf(
      "# %d of %d generated tokens follow the most likely transition (%.0f%%); "
      "tokens identical across %d tensor-parallel ranks\n",
      follows, total, 100.0 * follows / std::max(total, 1), a.layout.tp);
}

}  // namespace

int main(int argc, char** argv) {
  worker::Runtime rt{"faultline sharded inference worker"};
  InferArgs a;
  declare_infer_options(rt, a);
  if (auto rc = rt.parse(argc, argv)) return *rc;
  const auto cfg = rt.model_config(a.vocab);
  if (auto rc = rt.check_layout(cfg, a.layout)) return *rc;  // the harness's validate asks
  const int requests = a.requests;
  auto on_fetch = [&](const std::string& name, const std::string& path) {
    if (name == "tokenizer.json" && rdzv::tokenizer_vocab(path) > cfg.vocab) {
      raise<ConfigError>("tokenizer {} has {} tokens, the model's vocabulary only {}", path,
                         rdzv::tokenizer_vocab(path), cfg.vocab);
    }
  };
  const std::string hash = fmt::format("infer:{}:{}:{}", rt.model_name(), a.layout.tp, a.layout.pp);
  return rt.run(hash, on_fetch, [&](worker::Runtime::World& w) {
    auto& b = w.b;
    MemoryAccountant& acct = w.acct;
    infer::check_load_mode(a.load_mode);
    const auto reset = infer::parse_cache_reset(a.cache_reset, "--cache-reset");
    auto topo = parallel::build_topology(*b.comm, a.layout, cfg);
    const infer::InjectionChoice choice{a.injection, a.model_class, a.injection_policy, a.layout.tp,
                                        ops::job_versions().deepspeed};
    if (!a.checkpoint_json.empty()) {
      infer::check_checkpoint_load(choice,
                                   infer::read_checkpoint_description(a.checkpoint_json).type);
    }
    const std::string sharded = infer::choose_injection(choice);
    if (!sharded.empty() && b.comm->rank() == 0)
      std::printf("init_inference: %s\n", sharded.c_str());
    if (!a.meta_tensor && a.checkpoint_keys != "bare") {
      raise<ConfigError>(
          "workload.infer.checkpoint_keys {} is read only by the meta loader "
          "(workload.infer.meta_tensor: true)",
          a.checkpoint_keys);
    }
    const bool uninitialized = a.meta_tensor && load_meta(a, choice, cfg.layers, b.comm->rank());
    model::ParamLayout pl(cfg, a.layout.tp, topo.tp_rank, a.layout.pp, topo.pp_rank);
    auto params = load_weights(a, cfg, topo, pl);
    // to_empty's memory: what a fresh device allocation holds, zeros here.
    if (uninitialized) std::fill(params.begin(), params.end(), 0.0f);
    infer::InferenceEngine engine(cfg, topo, std::move(params), acct);
    engine.set_cache_reset(reset);
    engine.set_attention_window(attention_window(a));
    infer::GenerateConfig g = a.g;
    g.seed = rank_seed(a, topo);
    engine.set_step_sink([&](int64_t pos, double seconds, double comm_seconds,
                             const std::optional<std::vector<double>>& op_seconds) {
      nlohmann::json d = {
          {"step_time_s", seconds},        {"interval_s", seconds},
          {"comm_s", comm_seconds},        {"tokens_per_s", seconds > 0 ? requests / seconds : 0.0},
          {"mem_current", acct.current()}, {"mem_peak", acct.peak()}};
      if (op_seconds) d["comm_ops_s"] = *op_seconds;
      telemetry::emit("step", d, pos);
    });
    std::vector<std::vector<std::vector<int32_t>>> calls;
    for (int c = 0; c < a.calls; ++c) {
      calls.push_back(engine.generate(make_prompts(a, cfg, c), g));
      report_call(a, c, b.comm->rank(), calls.back());
    }
    // Every rank serves the same batches: report what this one produced, then make the tensor-
    // parallel ranks compare token by token.
    report_output(calls);
    for (size_t c = 0; c < calls.size(); ++c) {
      engine.check_tp_agreement(calls[c], static_cast<int>(c));
    }
    if (b.comm->rank() == 0) print_generations(calls, a, cfg);
    return 0;
  });
}
