// fl-infer: sharded inference worker. Loads weights from a training checkpoint (any DP size or
// ZeRO stage; its TP/PP must match) or the seeded initial weights, generates for a batch of
// prompts taken from the synthetic corpus, and reports how often the continuation follows the
// corpus's most likely transition (a trained model should, an untrained one does not).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "workloads/comm/bootstrap.hpp"
#include "workloads/comm/worker_errors.hpp"
#include "workloads/infer/engine.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/data.hpp"

int main(int argc, char** argv) {
  using namespace fl;
  CLI::App app{"faultline sharded inference worker"};
  model::Layout layout;
  infer::GenerateConfig g;
  std::string model_name = "tiny", checkpoint;
  int requests = 4, prompt_len = 4;
  g.max_new_tokens = 12;
  app.add_option("--model", model_name, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--tp", layout.tp, "Tensor-parallel size");
  app.add_option("--pp", layout.pp, "Pipeline-parallel size");
  app.add_option("--dp", layout.dp, "Replicas (each serves the same batch)");
  app.add_option("--checkpoint", checkpoint, "Load weights from this checkpoint");
  app.add_option("--requests", requests, "Batched requests");
  app.add_option("--prompt-len", prompt_len, "Prompt tokens per request");
  app.add_option("--new-tokens", g.max_new_tokens, "Tokens to generate");
  app.add_option("--top-k", g.top_k, "Top-k sampling (0: greedy)");
  app.add_option("--temperature", g.temperature, "Sampling temperature");
  app.add_option("--seed", g.seed, "Sampling seed");
  CLI11_PARSE(app, argc, argv);
  auto cfg = model_name == "small" ? model::GptConfig::small() : model::GptConfig::tiny();

  return comm::run_worker_main([&]() -> int {
    auto b = comm::bootstrap_worker(fmt::format("infer:{}:{}:{}", model_name, layout.tp, layout.pp),
                                    comm::kBackend.get());
    MemoryAccountant& acct = MemoryAccountant::cpu();
    acct.set_rank(b.comm->rank());
    auto topo = parallel::build_topology(*b.comm, layout, cfg);
    model::ParamLayout pl(cfg, layout.tp, topo.tp_rank, layout.pp, topo.pp_rank);
    std::vector<float> params(pl.total());
    if (checkpoint.empty()) {
      pl.initialize(params.data(), cfg.seed);
    } else {
      const std::string dir = train::resolve_checkpoint(checkpoint);
      auto m = train::read_manifest(dir);
      const auto& l = m.at("layout");
      if (l.at("tp").get<int>() != layout.tp || l.at("pp").get<int>() != layout.pp) {
        raise<CheckpointError>(
            "checkpoint {} is partitioned tp {} x pp {}; this server is tp {} x "
            "pp {}: shards of another partitioning cannot be loaded",
            dir, l.at("tp").get<int>(), l.at("pp").get<int>(), layout.tp, layout.pp);
      }
      params = train::reassemble_model_shard(dir, m, topo.tp_rank, topo.pp_rank, pl.total()).params;
    }
    infer::InferenceEngine engine(cfg, topo, std::move(params), acct);
    train::SyntheticCorpus corpus(cfg.vocab, cfg.seq_len, 1 << 20, 4242);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int32_t> in(static_cast<size_t>(cfg.seq_len)), tgt(in.size());
    for (int r = 0; r < requests; ++r) {
      corpus.sample(r, in.data(), tgt.data());
      prompts.emplace_back(in.begin(), in.begin() + prompt_len);
    }
    auto out = engine.generate(prompts, g);
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
