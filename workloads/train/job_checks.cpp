// The job's own settings a rank checks before it allocates anything (job_checks.hpp).
#include "workloads/train/job_checks.hpp"

#include "base/error.hpp"
#include "kernels/versions.hpp"
#include "workloads/model/state_dict.hpp"
#include "workloads/train/freeze.hpp"

namespace fl::train {

// The engine's configuration from the job's (topology.zero picks the stage; workload.zero and
// workload.ddp the rest); `rank` seeds a --seed-per-rank job's initialisation.
parallel::ZeroConfig zero_config_of(const TrainConfig& c, int stage, int rank) {
  parallel::ZeroConfig z;
  z.stage = stage;
  z.precision = c.precision;
  z.reduce_bucket_bytes = c.bucket_bytes;
  z.allgather_bucket_bytes = c.allgather_bucket_bytes;
  z.prefetch_bytes = c.zero3_prefetch_bytes;
  z.max_live_bytes = c.zero3_max_live_bytes;
  z.zero_init = c.zero_init;
  z.offload_optimizer = c.offload_optimizer;
  z.offload_param_nvme = c.offload_param == "nvme";
  z.nvme = parallel::nvme_config_of(ops::job_versions().deepspeed, c.precision);
  z.nvme.path = c.nvme_path;
  z.nvme.aio.block_size = c.aio_block_size;
  z.nvme.aio.intra_op = c.aio_thread_count;
  z.nvme.buffer_count = c.nvme_buffer_count;
  z.nvme.buffer_size = c.nvme_buffer_size;
  z.ddp_reducer = c.ddp_wrapper;
  z.find_unused_parameters = c.find_unused_parameters;
  z.gemini = c.zero_reducer == "gemini";
  z.seed = c.model.seed + (c.seed_per_rank ? rank : 0);
  z.broadcast_init = c.broadcast_init && z.stage < 3;
  z.optimizer_state_bytes = optimizer_state_bytes(c);  // 8: AdamW m, v; 4: SGD momentum; 0
  z.state_name = c.optimizer == "sgd" ? "optimizer.momentum_buffer" : "optimizer.exp_avg";
  return z;
}

// The job's own settings a rank's Trainer checks first, before it allocates anything (the
// precision, the checkpoint key prefixes, the schedule, the batch and DeepSpeed's batch triangle).
void check_job_config(const TrainConfig& c, const model::Layout& l) {
  if (c.precision != DType::kF32 && c.precision != DType::kF16 && c.precision != DType::kBF16) {
    raise<ConfigError>("precision {} is not supported for training (allowed: fp32, fp16, bf16)",
                       dtype_name(c.precision));
  }
  model::check_key_prefix(c.save_key_prefix, "workload.checkpoint.key_prefix (--save-key-prefix)");
  model::check_key_prefix(c.strip_key_prefix,
                          "workload.checkpoint.strip_prefix (--strip-key-prefix)");
  if (c.schedule != "1f1b" && c.schedule != "gpipe") {
    raise<ConfigError>("pipeline schedule '{}' is not supported (allowed: 1f1b, gpipe)",
                       c.schedule);
  }
  if (c.micro_batch < 1 || c.grad_accum < 1) {
    raise<ConfigError>("micro_batch {} and grad_accum {} must be at least 1", c.micro_batch,
                       c.grad_accum);
  }
  if (c.offload_param == "nvme" && c.model.moe.enabled()) {
    raise<ConfigError>(
        "workload.zero.offload_param (--offload-param) nvme is modelled for dense models: the "
        "experts' ZeRO engine would share the rank's swap folder and ds_ids (allowed: "
        "workload.moe.experts 0)");
  }
  if (c.grad_sync != "step" && c.grad_sync != "micro_batch") {
    raise<ConfigError>(
        "workload.grad_sync (--grad-sync) '{}' is not supported (allowed: step, "
        "micro_batch)",
        c.grad_sync);
  }
  // Stages 2-3 reduce each micro-batch's gradients during its backward already (the partition
  // keeps only its slice); a pipeline reduces once, after its schedule.
  if (c.grad_sync == "micro_batch" && (l.zero >= 2 || l.pp > 1)) {
    raise<ConfigError>(
        "workload.grad_sync (--grad-sync) micro_batch all-reduces a replicated model's "
        "gradients after every micro-batch (allowed: ZeRO stage 0-1 and pp 1; this run: stage "
        "{}, pp {})",
        l.zero, l.pp);
  }
  // DeepSpeed's batch triangle (runtime/config.py's _batch_assertion), checked at initialize:
  // a global batch written for another number of data-parallel ranks is refused before step 0.
  if (const int derived = c.micro_batch * c.grad_accum * l.dp;
      c.train_batch_size > 0 && c.train_batch_size != derived) {
    raise<ConfigError>(
        "AssertionError: Check batch related parameters. train_batch_size is not equal to "
        "micro_batch_per_gpu * gradient_acc_step * world_size {} != {} * {} * {}",
        c.train_batch_size, c.micro_batch, c.grad_accum, l.dp);
  }
  check_pair_loss(c, l);
}

OptimizerWrapper ds_optimizer_wrapper(const TrainConfig& c, const model::Layout& l) {
  return optimizer_wrapper({c.precision, c.grad_accum_dtype, l.zero, c.offload_optimizer, l.pp > 1},
                           ops::job_versions().deepspeed);
}

namespace {

// GeminiDDP's chunks as modelled: one backward per step (without enable_gradient_accumulation):
// grad_accum 1, or one pair (workload.pair_loss, grad_accum 2). (Its stage, 2, already refuses
// pipeline stages.) Frozen parameters, which Gemini keeps out of its gradient chunks, are not
// modelled there.
void check_gemini(const TrainConfig& c) {
  if (c.zero_reducer != "gemini") return;
  if (!c.freeze.empty()) {
    raise<ConfigError>(
        "workload.zero.reducer (--zero-reducer) gemini with workload.freeze (--freeze) is not "
        "modelled (Gemini's chunks leave frozen parameters out); allowed: one of the two");
  }
  if (c.grad_accum != (c.pair_loss ? 2 : 1)) {
    raise<ConfigError>(
        "workload.zero.reducer (--zero-reducer) gemini reduces each chunk in the step's one "
        "backward (GeminiPlugin without enable_gradient_accumulation), but grad_accum is {} "
        "(allowed: 1, or 2 with workload.pair_loss)",
        c.grad_accum);
  }
}

// workload.zero.deepcompile: DeepCompile's engines as modelled (its set-up at stage 3); a
// pipeline is the PipelineEngine, which DeepCompile does not compile.
void check_deepcompile(const TrainConfig& c, const model::Layout& l) {
  if (!c.deepcompile) return;
  if (l.pp > 1) {
    raise<ConfigError>(
        "workload.zero.deepcompile (--deepcompile) with pipeline stages (pp {}) is not modelled "
        "(DeepCompile compiles the ZeRO engine, not the PipelineEngine); allowed: pp 1",
        l.pp);
  }
}

// workload.grad_norm dtensor_per_mesh sums the replicated parameters over the ('dp',) submesh of
// the rank's own stage: with pipeline stages as well the norm would need the pipeline's too.
void check_grad_norm(const TrainConfig& c, const model::Layout& l) {
  if (c.grad_norm == "dtensor_per_mesh" && l.tp > 1 && l.pp > 1) {
    raise<ConfigError>(
        "workload.grad_norm dtensor_per_mesh (--grad-norm) with tp {} and pp {} is not modelled "
        "(the norm of each stage's meshes would also be all-reduced over the pipeline); allowed: "
        "tp 1 or pp 1",
        l.tp, l.pp);
  }
}

// workload.optimizer muon: DeepSpeed's Muon as modelled (muon.hpp).
void check_muon(const TrainConfig& c, const model::Layout& l) {
  if (c.optimizer != "muon") return;
  auto refuse = [](const std::string& what) {
    raise<ConfigError>("workload.optimizer muon (--optimizer muon) is modelled for {}", what);
  };
  if (c.precision != DType::kF32) {
    refuse(
        "fp32 only (allowed: workload.precision fp32; the ZeRO optimizer's 16-bit paths are "
        "not modelled)");
  }
  if (l.zero > 1) {
    refuse(fmt::format("ZeRO stages 0 and 1 (this run: {}; allowed: 0 or 1)", l.zero));
  }
  if (!c.save_dir.empty() || !c.resume.empty()) {
    refuse(
        "runs without checkpoints (allowed: no workload.checkpoint, --save-dir or --resume; "
        "Muon's momentum is not in faultline's checkpoints)");
  }
  if (l.pp > 1 && c.model.structure.tie_embeddings) {
    refuse(fmt::format(
        "tied embeddings on one stage (this run: pp {} with tied embeddings, whose last-stage "
        "copy would take AdamW where wte takes Muon; allowed: pp 1, or untied embeddings)",
        l.pp));
  }
  if (c.model.moe.enabled() || !c.freeze.empty() || c.ddp_wrapper ||
      c.zero_reducer != "deepspeed") {
    refuse(
        "DeepSpeed's engine over a dense model with every parameter trainable (allowed: no "
        "workload.moe, workload.freeze, workload.ddp.wrapper or Gemini reducer)");
  }
}

}  // namespace

// workload.ddp.wrapper: the layouts torch's DDP is modelled for (ConfigError otherwise).
void check_ddp(const TrainConfig& c, const model::Layout& l) {
  check_gemini(c);
  check_deepcompile(c, l);
  check_muon(c, l);
  check_grad_norm(c, l);
  if (!c.ddp_wrapper) return;
  const int ep = c.model.moe.enabled() ? c.model.moe.ep_size : 1;
  if (l.tp != 1 || l.pp != 1 || ep != 1) {
    raise<ConfigError>(
        "workload.ddp.wrapper (--ddp) wraps a model every data-parallel rank holds whole (allowed: "
        "tp 1, pp 1 and workload.moe.ep_size 1; this run: tp {}, pp {}, ep_size {})",
        l.tp, l.pp, ep);
  }
  if (c.grad_accum != 1) {
    raise<ConfigError>(
        "workload.ddp.wrapper (--ddp) checks every backward's reduction, but grad_accum is {} "
        "(allowed: 1; the reducer under no_sync accumulation is not modelled)",
        c.grad_accum);
  }
}

void validate_before_world(const TrainConfig& cfg, const model::Layout& l) {
  validate_numerics(cfg);  // in the order a rank's Trainer makes them
  check_job_config(cfg, l);
  ds_optimizer_wrapper(cfg, l);  // DeepSpeed's NotImplementedError for a refused mix of types
  check_ddp(cfg, l);
  check_freeze(cfg.freeze, cfg.model);
  for (int stage = 0; stage < l.pp; ++stage) {
    for (int t = 0; t < l.tp; ++t) {
      const model::ParamLayout share(cfg.model, l.tp, t, l.pp, stage);
      parallel::validate(zero_config_of(cfg, l.zero, 0), share.total(), l.dp);
    }
  }
}

}  // namespace fl::train
