// fl-infer: sharded inference worker. Loads weights from a training checkpoint (any DP size or
// ZeRO stage; its TP/PP must match) or the seeded initial weights, generates for a batch of
// prompts taken from the synthetic corpus, and reports how often the continuation follows the
// corpus's most likely transition (a trained model should, an untrained one does not).
#include <xxhash.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "injector/describe.hpp"
#include "kernels/plugin.hpp"
#include "workloads/rendezvous/artifacts.hpp"
#include "workloads/telemetry/telemetry.hpp"

#include "workloads/comm/bootstrap.hpp"
#include "workloads/comm/worker_errors.hpp"
#include "workloads/infer/engine.hpp"
#include "workloads/infer/load.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/data.hpp"

int main(int argc, char** argv) {
  using namespace fl;
  // The harness asks for this worker's settings and fault sites (`faultline settings/sites`).
  if (fault::describe_if_asked(argc, argv)) return 0;
  CLI::App app{"faultline sharded inference worker"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  model::Layout layout;
  infer::GenerateConfig g;
  std::string model_name = "tiny", checkpoint;
  int requests = 4, prompt_len = 4;
  uint64_t prompt_seed = 4242;
  std::vector<std::string> plugins;
  bool plugin_jit = false;
  g.max_new_tokens = 12;
  app.add_option("--model", model_name, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  int vocab = 0;
  app.add_option("--vocab", vocab, "Override the vocabulary size");
  app.add_option("--tp", layout.tp, "Tensor-parallel size");
  app.add_option("--pp", layout.pp, "Pipeline-parallel size");
  app.add_option("--dp", layout.dp, "Replicas (each serves the same batch)");
  app.add_option("--checkpoint", checkpoint, "Load weights from this checkpoint");
  std::string load_mode = "sharded";
  app.add_option("--load", load_mode,
                 "How a rank loads the checkpoint: sharded (only its own shard files) or full "
                 "(the whole checkpoint into host memory, then its shard kept)");
  int64_t host_budget = -1;
  app.add_option("--host-memory-budget", host_budget,
                 "Host memory budget in bytes (default FAULTLINE_HOST_MEMORY_BUDGET_BYTES; 0: "
                 "unlimited)");
  int d_model = 0, layers = 0, heads = 0, seq_len = 0;
  app.add_option("--d-model", d_model, "Override the model width")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "Override the number of layers")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "Override the number of attention heads")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq-len", seq_len, "Override the context length")->check(CLI::PositiveNumber);
  app.add_option("--requests", requests, "Batched requests");
  app.add_option("--prompt-len", prompt_len, "Prompt tokens per request");
  app.add_option("--new-tokens", g.max_new_tokens, "Tokens to generate");
  app.add_option("--top-k", g.top_k, "Top-k sampling (0: greedy)");
  app.add_option("--temperature", g.temperature, "Sampling temperature");
  app.add_option("--seed", g.seed, "Sampling seed");
  app.add_option("--prompt-seed", prompt_seed, "Seed of the corpus the prompts are drawn from");
  app.add_option("--plugin", plugins, "Load kernel plugin libfl_NAME.so (FAULTLINE_PLUGIN_PATH)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--plugin-jit", plugin_jit, "Build the plugins from source at start (CXX)");
  std::string device = kComputeDevice.get();
  app.add_option("--device", device, "Where to compute: cpu or cuda (default FAULTLINE_DEVICE)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  std::vector<std::string> fetch;
  app.add_option("--fetch", fetch, "Fetch an artifact at start (FAULTLINE_ARTIFACT_URL)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  CLI11_PARSE(app, argc, argv);
  auto cfg = model_name == "small" ? model::GptConfig::small() : model::GptConfig::tiny();
  if (vocab > 0) cfg.vocab = vocab;
  if (d_model > 0) cfg.d_model = d_model;
  if (layers > 0) cfg.layers = layers;
  if (heads > 0) cfg.heads = heads;
  if (seq_len > 0) cfg.seq_len = seq_len;

  return comm::run_worker_main([&]() -> int {
    auto b = comm::bootstrap_worker(fmt::format("infer:{}:{}:{}", model_name, layout.tp, layout.pp),
                                    comm::kBackend.get(), device);
    // Serving kernels load once the world has formed, before the model is built.
    for (auto& p : plugins) ops::load_plugin(p, plugin_jit);
    for (auto& f : fetch) {
      const std::string path = rdzv::fetch_artifact(f);
      if (f == "tokenizer.json" && rdzv::tokenizer_vocab(path) > cfg.vocab) {
        raise<ConfigError>("tokenizer {} has {} tokens, the model's vocabulary only {}", path,
                           rdzv::tokenizer_vocab(path), cfg.vocab);
      }
    }
    MemoryAccountant::cpu().set_rank(b.comm->rank());
    MemoryAccountant::host().set_rank(b.comm->rank());
    if (host_budget >= 0) MemoryAccountant::host().set_budget(static_cast<size_t>(host_budget));
    infer::check_load_mode(load_mode);
    MemoryAccountant& acct = MemoryAccountant::of(b.compute);
    acct.set_rank(b.comm->rank());
    auto topo = parallel::build_topology(*b.comm, layout, cfg);
    model::ParamLayout pl(cfg, layout.tp, topo.tp_rank, layout.pp, topo.pp_rank);
    std::vector<float> params(pl.total());
    if (checkpoint.empty()) {
      pl.initialize(params.data(), cfg.seed);
    } else {
      const std::string dir = train::resolve_checkpoint(checkpoint);
      auto m = train::read_manifest(dir);
      train::check_compatible(dir, m, cfg);
      const auto& l = m.at("layout");
      if (l.at("tp").get<int>() != layout.tp || l.at("pp").get<int>() != layout.pp) {
        raise<CheckpointError>(
            "checkpoint {} is partitioned tp {} x pp {}; this server is tp {} x "
            "pp {}: shards of another partitioning cannot be loaded",
            dir, l.at("tp").get<int>(), l.at("pp").get<int>(), layout.tp, layout.pp);
      }
      params = infer::load_inference_weights(dir, m, topo.tp_rank, topo.pp_rank, pl.total(),
                                             load_mode, MemoryAccountant::host());
    }
    infer::InferenceEngine engine(cfg, topo, std::move(params), acct);
    train::SyntheticCorpus corpus(cfg.vocab, cfg.seq_len, 1 << 20, prompt_seed);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int32_t> in(static_cast<size_t>(cfg.seq_len)), tgt(in.size());
    for (int r = 0; r < requests; ++r) {
      corpus.sample(r, in.data(), tgt.data());
      prompts.emplace_back(in.begin(), in.begin() + prompt_len);
    }
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
    auto out = engine.generate(prompts, g);
    // Every rank serves the same batch: report what this one produced, then make the tensor-
    // parallel ranks compare token by token.
    std::vector<int32_t> flat;
    for (auto& o : out) flat.insert(flat.end(), o.begin(), o.end());
    const auto digest = XXH64(flat.data(), flat.size() * sizeof(int32_t), 0);
    telemetry::emit("output",
                    {{"what", "tokens"},
                     {"digest", fmt::format("{:016x}", static_cast<unsigned long long>(digest))},
                     {"group", "all"}});
    engine.check_tp_agreement(out);
    int follows = 0, total = 0;
    for (auto& o : out) {
      for (size_t i = static_cast<size_t>(prompt_len); i < o.size(); ++i) {
        follows += o[i] == (o[i - 1] * 7 + 3) % cfg.vocab;  // the chain's most likely successor
        ++total;
      }
    }
    if (b.comm->rank() == 0) {
      for (size_t r = 0; r < out.size(); ++r) {
        std::printf("request %zu:", r);
        for (size_t i = 0; i < out[r].size(); ++i) {
          std::printf("%s%d", i == static_cast<size_t>(prompt_len) ? " |" : " ", out[r][i]);
        }
        std::printf("\n");
      }
      std::printf(
          "# %d of %d generated tokens follow the most likely transition (%.0f%%); "
          "tokens identical across %d tensor-parallel ranks\n",
          follows, total, 100.0 * follows / std::max(total, 1), layout.tp);
    }
    comm::finish_worker(b);
    return 0;
  });
}
