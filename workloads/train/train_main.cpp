// fl-train: the training worker. Bootstraps like every worker (store, world check, backend),
// builds the DP × TP × PP groups, trains the GPT on the synthetic corpus and prints one line per
// step from rank 0 (loss, grad norm, lr, loss scale, step time, tokens/s, memory). --metrics
// writes every step as JSON lines; --checksum prints each rank's parameter checksum.
#include <xxhash.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "injector/describe.hpp"
#include "kernels/plugin.hpp"
#include "workloads/comm/bootstrap.hpp"
#include "workloads/comm/worker_errors.hpp"
#include "workloads/rendezvous/artifacts.hpp"
#include "workloads/telemetry/telemetry.hpp"
#include "workloads/train/checkpoint.hpp"
#include "workloads/train/memory_report.hpp"
#include "workloads/train/trainer.hpp"

int main(int argc, char** argv) {
  using namespace fl;
  // The harness asks for this worker's settings and fault sites (`faultline settings/sites`).
  if (fault::describe_if_asked(argc, argv)) return 0;
  CLI::App app{"faultline GPT training worker"};
  // A later occurrence of an option wins, as with most launchers' argument handling: extra
  // arguments appended to a command override what came before.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train::TrainConfig cfg;
  std::string model_name = "tiny", precision = "fp32", metrics_path;
  bool checksum = false;
  app.add_option("--model", model_name, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--vocab", cfg.model.vocab, "Override the vocabulary size");
  // Shape overrides of the chosen model (benchmarks run GPT-2-sized shapes with them).
  int d_model = 0, layers = 0, heads = 0, seq_len = 0;
  app.add_option("--d-model", d_model, "Override the model width")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "Override the number of layers")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "Override the number of attention heads")
      ->check(CLI::PositiveNumber);
  app.add_option("--seq-len", seq_len, "Override the context length")->check(CLI::PositiveNumber);
  app.add_option("--dp", cfg.layout.dp, "Data-parallel size");
  app.add_option("--tp", cfg.layout.tp, "Tensor-parallel size");
  app.add_option("--pp", cfg.layout.pp, "Pipeline-parallel size");
  app.add_option("--zero", cfg.layout.zero, "ZeRO stage 0-3");
  app.add_option("--micro-batch", cfg.micro_batch, "Samples per micro-batch per DP rank");
  app.add_option("--grad-accum", cfg.grad_accum, "Micro-batches per step");
  app.add_option("--steps", cfg.steps, "Steps (when --epochs is 0)");
  app.add_option("--epochs", cfg.epochs, "Run whole epochs instead of --steps");
  app.add_option("--samples", cfg.num_samples, "Dataset size");
  app.add_flag("--drop-last", cfg.drop_last, "Drop the uneven tail of the dataset and batches");
  app.add_option("--data-seed", cfg.data_seed, "Data seed");
  app.add_option("--data-vocab", cfg.data_vocab,
                 "Vocabulary of the data pipeline's tokenizer (0: the model's)");
  app.add_flag("--seed-per-rank", cfg.seed_per_rank,
               "Initialise each rank's weights with seed + rank");
  app.add_flag("--broadcast-init", cfg.broadcast_init,
               "Broadcast data-parallel rank 0's initial weights to its replicas");
  app.add_option("--check-replicas-every", cfg.check_replicas_every,
                 "Compare parameter hashes across data-parallel replicas every N steps");
  app.add_option("--lr", cfg.lr, "Peak learning rate");
  app.add_option("--warmup,--warmup-steps", cfg.warmup_steps, "Warm-up steps");
  app.add_option("--warmup-style", cfg.warmup_style,
                 "Warm-up: linear (ramp to the peak), constant (the unscaled lr) or none");
  app.add_option("--lr-scaling", cfg.lr_scaling,
                 "Scale the lr schedule with the data-parallel size: none, linear (x dp) or sqrt");
  app.add_option("--optimizer", cfg.optimizer, "adamw or sgd");
  app.add_option("--momentum", cfg.momentum, "SGD momentum (0: plain SGD)");
  app.add_option("--clip", cfg.grad_clip, "Gradient clipping norm (0: off)");
  app.add_option("--precision", precision, "fp32, fp16 or bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--loss-scale", cfg.loss_scale.initial_scale, "Initial fp16 loss scale");
  app.add_option("--min-loss-scale", cfg.loss_scale.min_scale, "Minimum fp16 loss scale");
  app.add_option("--loss-scale-window", cfg.loss_scale.growth_interval,
                 "Clean steps before the fp16 loss scale doubles");
  app.add_option("--hysteresis", cfg.loss_scale.hysteresis,
                 "fp16 overflows tolerated before the loss scale is lowered");
  app.add_flag("--consecutive-hysteresis", cfg.loss_scale.consecutive_hysteresis,
               "Restore the hysteresis after every clean step (not only when the scale grows)");
  app.add_option("--raise-error-at-min-scale", cfg.loss_scale.raise_error_at_min_scale,
                 "true: an overflow at the minimum loss scale stops the run (DeepSpeed's "
                 "default); false: the step is skipped and training goes on");
  app.add_option("--schedule", cfg.schedule, "Pipeline schedule: 1f1b or gpipe");
  app.add_option("--eval-every", cfg.eval_every, "Evaluate every N steps (0: never)");
  app.add_option("--eval-batches", cfg.eval_batches, "Micro-batches per evaluation");
  app.add_option("--eval-samples", cfg.eval_samples,
                 "Evaluation set size (0: --eval-batches micro-batches per data-parallel rank)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--eval-drop-last", cfg.eval_drop_last,
               "Drop the evaluation set's uneven tail and partial last batch");
  app.add_flag(
      "--no-zero-init", [&](int64_t) { cfg.zero_init = false; },
      "ZeRO-3: materialise the whole model before partitioning");
  app.add_option("--reduce-bucket-size", cfg.bucket_bytes,
                 "Gradient bucket in bytes: all-reduced (ZeRO 0-1) or reduced into the partition "
                 "as the backward fills it (ZeRO 2-3)");
  app.add_option("--allgather-bucket-size", cfg.allgather_bucket_bytes,
                 "ZeRO 1-2: bytes per rank of each all-gather of the updated parameters");
  app.add_option("--zero3-prefetch-bytes", cfg.zero3_prefetch_bytes,
                 "ZeRO-3: gather parameter groups this many bytes ahead of their use (0: off)");
  app.add_option("--zero3-max-live-bytes", cfg.zero3_max_live_bytes,
                 "ZeRO-3: keep gathered groups resident while they total at most this (0: free "
                 "each after use)");
  app.add_flag("--offload-optimizer", cfg.offload_optimizer,
               "Keep the partition's fp32 master weights and Adam moments on the host (ZeRO >= 1)");
  int64_t host_budget = -1;
  app.add_option("--host-memory-budget", host_budget,
                 "Host memory budget in bytes for offloaded state (default "
                 "FAULTLINE_HOST_MEMORY_BUDGET_BYTES; 0: unlimited)");
  app.add_flag("--activation-checkpointing", cfg.activation_checkpointing,
               "Recompute each block's forward during the backward instead of keeping it");
  bool memory_report = false;
  app.add_flag("--memory-report", memory_report,
               "Print every rank's peak memory per category (params, grads, optimizer, "
               "activations, buffers, gathers) at the end");
  app.add_option("--save-dir", cfg.save_dir, "Write sharded checkpoints under this directory");
  app.add_option("--save-every", cfg.save_every, "Checkpoint every N steps (and after the last)");
  app.add_option("--resume", cfg.resume, "Resume from a checkpoint (step dir or save dir)");
  std::string auto_resume;
  bool resume_scan = false;
  app.add_option("--auto-resume", auto_resume,
                 "Resume from DIR's latest checkpoint when there is one, else start fresh");
  app.add_flag("--resume-scan", resume_scan,
               "--auto-resume without a 'latest' file: take the newest complete step_<N>");
  app.add_option("--metrics", metrics_path, "Write per-step metrics as JSON lines (rank 0)");
  std::vector<std::string> plugins;
  bool plugin_jit = false;
  app.add_option("--plugin", plugins, "Load kernel plugin libfl_NAME.so (FAULTLINE_PLUGIN_PATH)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--plugin-jit", plugin_jit, "Build the plugins from source at start (CXX)");
  std::vector<std::string> fetch;
  app.add_option("--fetch", fetch,
                 "Fetch an artifact at start (FAULTLINE_ARTIFACT_URL); tokenizer.json sets the "
                 "data pipeline's vocabulary")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  std::vector<int64_t> skip_batches;
  app.add_option("--skip-batches", skip_batches, "Steps whose batches are skipped (recovery)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--reset-loss-scale", cfg.reset_loss_scale,
               "Reset the fp16 loss scale to its initial value after resuming (recovery)");
  app.add_flag("--checksum", checksum, "Print every rank's parameter checksum at the end");
  std::string device = kComputeDevice.get();
  app.add_option("--device", device, "Where to compute: cpu or cuda (default FAULTLINE_DEVICE)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  cfg.skip_steps.insert(skip_batches.begin(), skip_batches.end());
  const int vocab_override = cfg.model.vocab;
  cfg.model = model_name == "small" ? model::GptConfig::small() : model::GptConfig::tiny();
  if (app.count("--vocab")) cfg.model.vocab = vocab_override;
  if (d_model > 0) cfg.model.d_model = d_model;
  if (layers > 0) cfg.model.layers = layers;
  if (heads > 0) cfg.model.heads = heads;
  if (seq_len > 0) cfg.model.seq_len = seq_len;
  cfg.precision = *parse_dtype(precision);

  return comm::run_worker_main([&]() -> int {
    const std::string hash =
        fmt::format("gpt:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}:{}", cfg.model.vocab, cfg.model.d_model,
                    cfg.model.layers, cfg.model.heads, cfg.model.seq_len, cfg.layout.dp,
                    cfg.layout.tp, cfg.layout.pp, cfg.layout.zero, precision, cfg.micro_batch);
    auto b = comm::bootstrap_worker(hash, comm::kBackend.get(), device);
    // Plugins load once the world has formed, when the optimizer is built (as DeepSpeed loads
    // its fused ops): a rank that cannot load one ends, the others wait for it in a collective.
    for (auto& p : plugins) ops::load_plugin(p, plugin_jit);
    for (auto& f : fetch) {
      const std::string path = rdzv::fetch_artifact(f);
      if (f == "tokenizer.json") cfg.data_vocab = rdzv::tokenizer_vocab(path);
    }
    MemoryAccountant::cpu().set_rank(b.comm->rank());
    MemoryAccountant::host().set_rank(b.comm->rank());
    if (host_budget >= 0) MemoryAccountant::host().set_budget(static_cast<size_t>(host_budget));
    MemoryAccountant& acct = MemoryAccountant::of(b.compute);
    acct.set_rank(b.comm->rank());
    auto topo = parallel::build_topology(*b.comm, cfg.layout, cfg.model);
    if (!auto_resume.empty() && cfg.resume.empty()) {
      std::string note;
      cfg.resume = train::auto_resume_target(auto_resume, resume_scan, note);
      if (b.comm->rank() == 0) std::printf("# %s\n", note.c_str());
      telemetry::emit("warning", {{"what", "auto_resume"}, {"message", note}});
    }
    train::Trainer trainer(cfg, topo, acct);
    telemetry::emit("layout", {{"dp", cfg.layout.dp},
                               {"tp", cfg.layout.tp},
                               {"pp", cfg.layout.pp},
                               {"zero", cfg.layout.zero},
                               {"dp_rank", topo.dp_rank},
                               {"tp_rank", topo.tp_rank},
                               {"pp_rank", topo.pp_rank},
                               {"steps", trainer.planned_steps()},
                               {"precision", precision},
                               {"cpu_ms", comm::process_cpu_ms()},
                               {"world_cpu_ms", b.world_cpu_ms}});
    const bool printer = b.comm->rank() == 0;
    std::ofstream metrics;
    if (printer && !metrics_path.empty()) metrics.open(metrics_path);
    // "bf16 (bf16 GEMMs)" where the rank's GEMMs run on tensor cores.
    const std::string precision_note =
        trainer.gemm_precision() == DType::kF32
            ? precision
            : fmt::format("{} ({} GEMMs)", precision, dtype_name(trainer.gemm_precision()));
    if (printer) {
      std::printf(
          "# gpt %s: vocab %d, d_model %d, layers %d, heads %d, seq %d | world %d = dp %d "
          "x tp %d x pp %d, zero %d, %s, micro-batch %d x %d, schedule %s, %s, %s backend\n",
          model_name.c_str(), cfg.model.vocab, cfg.model.d_model, cfg.model.layers, cfg.model.heads,
          cfg.model.seq_len, b.comm->size(), cfg.layout.dp, cfg.layout.tp, cfg.layout.pp,
          cfg.layout.zero, precision_note.c_str(), cfg.micro_batch, cfg.grad_accum,
          cfg.schedule.c_str(), b.compute.str().c_str(), b.comm->backend().data());
      std::printf("# %5s %10s %9s %9s %10s %8s %9s %10s %10s\n", "step", "loss", "gnorm", "lr",
                  "scale", "ms", "tok/s", "mem MiB", "peak MiB");
    }
    trainer.set_metrics_sink([&](const train::StepMetrics& m) {
      nlohmann::json d = {{"loss", m.loss},
                          {"grad_norm", m.grad_norm},
                          {"lr", m.lr},
                          {"loss_scale", m.loss_scale},
                          {"skipped", m.skipped},
                          {"step_time_s", m.step_time_s},
                          {"interval_s", m.interval_s},
                          {"comm_s", m.comm_s},
                          {"tokens_per_s", m.tokens_per_s},
                          {"mem_current", m.mem_current},
                          {"mem_peak", m.mem_peak}};
      if (m.eval_loss) d["eval_loss"] = *m.eval_loss;
      telemetry::emit("step", d, m.step);
      if (!printer) return;
      std::printf("  %5lld %10.6f %9.4f %9.2e %10.0f %8.1f %9.0f %10.2f %10.2f%s%s\n",
                  static_cast<long long>(m.step), m.loss, m.grad_norm, m.lr, m.loss_scale,
                  m.step_time_s * 1e3, m.tokens_per_s, m.mem_current / 1048576.0,
                  m.mem_peak / 1048576.0, m.skipped ? "  (skipped: overflow)" : "",
                  m.eval_loss ? fmt::format("  eval {:.6f}", *m.eval_loss).c_str() : "");
      std::fflush(stdout);
      if (metrics.is_open()) {
        nlohmann::json j = {{"step", m.step},
                            {"epoch", m.epoch},
                            {"loss", m.loss},
                            {"grad_norm", m.grad_norm},
                            {"lr", m.lr},
                            {"loss_scale", m.loss_scale},
                            {"skipped", m.skipped},
                            {"skipped_total", m.skipped_total},
                            {"step_time_s", m.step_time_s},
                            {"tokens_per_s", m.tokens_per_s},
                            {"mem_current", m.mem_current},
                            {"mem_peak", m.mem_peak}};
        if (m.eval_loss) j["eval_loss"] = *m.eval_loss;
        metrics << j.dump() << '\n';
        metrics.flush();
      }
    });
    auto history = trainer.run();
    if (checksum) {
      auto p = trainer.full_parameters();
      auto h = XXH64(p.data(), p.size() * sizeof(float), 0);
      std::printf("checksum rank %d (dp %d tp %d pp %d): %016llx\n", b.comm->rank(), topo.dp_rank,
                  topo.tp_rank, topo.pp_rank, static_cast<unsigned long long>(h));
      telemetry::emit("output",
                      {{"what", "parameters"},
                       {"digest", fmt::format("{:016x}", static_cast<unsigned long long>(h))},
                       {"group", "all"}});
      std::fflush(stdout);
    }
    if (memory_report) train::print_memory_report(*b.comm, acct, MemoryAccountant::host());
    if (printer) std::printf("# done: %zu steps\n", history.size());
    comm::finish_worker(b);
    return 0;
  });
}
