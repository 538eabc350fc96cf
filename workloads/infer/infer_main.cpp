// fl-infer: sharded inference worker. Loads weights from a training checkpoint (any DP size or
// ZeRO stage; its TP/PP must match) or the seeded initial weights, generates for a batch of
// prompts taken from the synthetic corpus, and reports how often the continuation follows the
// corpus's most likely transition (a trained model should, an untrained one does not).
#include <xxhash.h>

#include <cstdio>

#include "workloads/infer/engine.hpp"
#include "workloads/infer/load.hpp"
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
  std::string checkpoint, load_mode = "sharded";
  int requests = 4, prompt_len = 4, vocab = 0;
  uint64_t prompt_seed = 4242;
};

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
        "Tokens to generate (with prompt_len, within the context: tiny 16, small 64)")
      .range(1, 4096)
      .scenario_default("8");
  o.add("workload.infer.load", "--load", a.load_mode,
        "How each rank loads the checkpoint: sharded (only its own shard files) or full (the "
        "whole checkpoint into host memory, charged to the host budget, then its shard kept)")
      .choices({"sharded", "full"});
  auto& app = rt.app();
  app.add_option("--vocab", a.vocab, "Override the vocabulary size");
  app.add_option("--tp", a.layout.tp, "Tensor-parallel size");
  app.add_option("--pp", a.layout.pp, "Pipeline-parallel size");
  app.add_option("--dp", a.layout.dp, "Replicas (each serves the same batch)");
  app.add_option("--checkpoint", a.checkpoint, "Load weights from this checkpoint");
  app.add_option("--top-k", a.g.top_k, "Top-k sampling (0: greedy)");
  app.add_option("--temperature", a.g.temperature, "Sampling temperature");
  app.add_option("--seed", a.g.seed, "Sampling seed");
  app.add_option("--prompt-seed", a.prompt_seed, "Seed of the corpus the prompts are drawn from");
}

// The weights this rank serves: a checkpoint's shards (its TP x PP must be this server's) or the
// seeded initial ones.
std::vector<float> load_weights(const InferArgs& a, const model::GptConfig& cfg,
                                const parallel::Topology& topo, const model::ParamLayout& pl) {
  std::vector<float> params(pl.total());
  if (a.checkpoint.empty()) {
    pl.initialize(params.data(), cfg.seed);
    return params;
  }
  const std::string dir = train::resolve_checkpoint(a.checkpoint);
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

// The batch: `requests` prompts of `prompt_len` tokens from the synthetic corpus.
std::vector<std::vector<int32_t>> make_prompts(const InferArgs& a, const model::GptConfig& cfg) {
  train::SyntheticCorpus corpus(cfg.vocab, cfg.seq_len, 1 << 20, a.prompt_seed);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> in(static_cast<size_t>(cfg.seq_len)), tgt(in.size());
  for (int r = 0; r < a.requests; ++r) {
    corpus.sample(r, in.data(), tgt.data());
    prompts.emplace_back(in.begin(), in.begin() + a.prompt_len);
  }
  return prompts;
}

// What this rank produced (an output event the harness compares across ranks).
void report_output(const std::vector<std::vector<int32_t>>& out) {
  std::vector<int32_t> flat;
  for (auto& o : out) flat.insert(flat.end(), o.begin(), o.end());
  const auto digest = XXH64(flat.data(), flat.size() * sizeof(int32_t), 0);
  telemetry::emit("output",
                  {{"what", "tokens"},
                   {"digest", fmt::format("{:016x}", static_cast<unsigned long long>(digest))},
                   {"group", "all"}});
}

// Rank 0 prints every request and how often the continuation follows the corpus's most likely
// transition.
void print_generations(const std::vector<std::vector<int32_t>>& out, const InferArgs& a,
                       const model::GptConfig& cfg) {
  const auto prompt_len = static_cast<size_t>(a.prompt_len);
  int follows = 0, total = 0;
  for (auto& o : out) {
    for (size_t i = prompt_len; i < o.size(); ++i) {
      follows += o[i] == (o[i - 1] * 7 + 3) % cfg.vocab;  // the chain's most likely successor
      ++total;
    }
  }
  for (size_t r = 0; r < out.size(); ++r) {
    std::printf("request %zu:", r);
    for (size_t i = 0; i < out[r].size(); ++i) {
      std::printf("%s%d", i == prompt_len ? " |" : " ", out[r][i]);
    }
    std::printf("\n");
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
    auto topo = parallel::build_topology(*b.comm, a.layout, cfg);
    model::ParamLayout pl(cfg, a.layout.tp, topo.tp_rank, a.layout.pp, topo.pp_rank);
    auto params = load_weights(a, cfg, topo, pl);
    infer::InferenceEngine engine(cfg, topo, std::move(params), acct);
    const auto prompts = make_prompts(a, cfg);
    engine.set_step_sink([&](int64_t pos, double seconds, double comm_seconds) {
      telemetry::emit("step",
                      {{"step_time_s", seconds},
                       {"interval_s", seconds},
                       {"comm_s", comm_seconds},
                       {"tokens_per_s", seconds > 0 ? requests / seconds : 0.0},
                       {"mem_current", acct.current()},
                       {"mem_peak", acct.peak()}},
                      pos);
    });
    auto out = engine.generate(prompts, a.g);
    // Every rank serves the same batch: report what this one produced, then make the tensor-
    // parallel ranks compare token by token.
    report_output(out);
    engine.check_tp_agreement(out);
    if (b.comm->rank() == 0) print_generations(out, a, cfg);
    return 0;
  });
}
