// fl-train's options. A scenario key here is the whole declaration of a workload knob: the build
// writes these out (`fl-train --describe-options`), the harness validates the key against them
// and passes the flag when a scenario sets it (docs/workloads.md#options).
#include "workloads/train/train_options.hpp"

namespace fl::train {

namespace {

void optimizer_options(worker::Options& o, TrainArgs& a) {
  auto& c = a.cfg;
  o.add("workload.steps", "--steps", c.steps, "Training steps").range(1, 1000000);
  o.add("workload.precision", "--precision", a.precision, "Compute precision")
      .choices({"fp32", "fp16", "bf16"});
  o.add("workload.micro_batch", "--micro-batch", c.micro_batch,
        "Samples per micro-batch per DP rank")
      .range(1, 4096);
  o.add("workload.grad_accum", "--grad-accum", c.grad_accum, "Micro-batches per step")
      .range(1, 1024);
  o.add("workload.grad_accum_dtype", "--grad-accum-dtype", c.grad_accum_dtype,
        "DeepSpeed's data_types.grad_accum_dtype: fp32, fp16, bf16, or unset for its default "
        "(the model's type; fp32 for bf16 without ZeRO before 0.17.6). With the model's type, "
        "the ZeRO stage, optimizer offload and pipeline stages it picks the optimizer wrapper as "
        "workload.versions.deepspeed did, or DeepSpeed's NotImplementedError at initialize; "
        "before 0.11.2 a bf16 pipeline without BF16_Optimizer fails its first backward on a "
        "stage that is not the last (clear_lp_grads) and its ReduceGrads on the last");
  o.add("workload.grad_sync", "--grad-sync", c.grad_sync,
        "When ZeRO 0-1 all-reduce the gradients under grad_accum: step (once, after the last "
        "micro-batch, as DeepSpeed's boundary or DDP's no_sync on the others) or micro_batch "
        "(after every micro-batch: a no_sync guard that does nothing; the same sum up to "
        "rounding, grad_accum times the gradient traffic)")
      .choices({"step", "micro_batch"});
  o.add("workload.train_batch_size", "--train-batch-size", c.train_batch_size,
        "DeepSpeed's train_batch_size: samples per step over all data-parallel ranks, which must "
        "equal micro_batch x grad_accum x dp (0: derived from them)")
      .range(0, 1e9);
  o.add("workload.lr", "--lr", c.lr, "Peak learning rate").range(0, 10);
  o.add("workload.clip", "--clip", c.grad_clip, "Gradient clipping norm (0: off)").range(0, 1e9);
  o.add("workload.grad_norm", "--grad-norm", c.grad_norm,
        "How clipping computes the global gradient norm: flat (one sum over the rank's buffers, "
        "one all-reduce), dtensor_stack (torch.nn.utils.clip_grad_norm_ over DTensor gradients "
        "as FSDP2 with expert parallelism holds them: each parameter's norm on its parameter's "
        "device mesh, stacked, which DTensor refuses when the experts' mesh differs from the "
        "dense parameters') or dtensor_per_mesh (each mesh's norm reduced over its own ranks, "
        "then combined)")
      .choices({"flat", "dtensor_stack", "dtensor_per_mesh"});
  o.add("workload.schedule", "--schedule", c.schedule, "Pipeline schedule")
      .choices({"1f1b", "gpipe"});
  o.add("workload.eval_every", "--eval-every", c.eval_every, "Evaluate every N steps (0: never)")
      .range(0, 1000000);
  o.add("workload.loss_scale", "--loss-scale", c.loss_scale.initial_scale,
        "Initial fp16 loss scale")
      .range(0, 1e38);
  o.add("workload.min_loss_scale", "--min-loss-scale", c.loss_scale.min_scale,
        "Smallest fp16 loss scale before the run fails")
      .range(0, 1e38);
  o.add("workload.loss_scale_window", "--loss-scale-window", c.loss_scale.growth_interval,
        "Clean steps in a row before the fp16 loss scale doubles (DeepSpeed's loss_scale_window)")
      .range(1, 1e9);
  o.add("workload.hysteresis", "--hysteresis", c.loss_scale.hysteresis,
        "fp16 overflows tolerated (steps skipped) before the loss scale is halved")
      .range(1, 1e6);
  o.add("workload.raise_error_at_min_scale", "--raise-error-at-min-scale",
        c.loss_scale.raise_error_at_min_scale,
        "An overflow at the minimum loss scale stops the run with DeepSpeed's error; false: the "
        "step is skipped and training goes on at the minimum scale");
  o.add("workload.optimizer", "--optimizer", c.optimizer,
        "Optimizer: adamw, sgd, or muon (DeepSpeed's MuonWithAuxAdam: Muon for the 2-D "
        "parameters not named embed or lm_head, AdamW for the rest; fp32, ZeRO stage 0 or 1, tp "
        "1; at stage 0, DeepSpeed's default, its step takes the raw gradients: plain SGD)")
      .choices({"adamw", "sgd", "muon"});
  o.add("workload.momentum", "--momentum", c.momentum,
        "SGD momentum (optimizer: sgd; 0: plain SGD), or Muon's (optimizer: muon; 0: DeepSpeed's "
        "default, 0.95)")
      .range(0, 0.9999);
  o.add("workload.weight_decay", "--weight-decay", c.weight_decay,
        "Weight decay: AdamW's decoupled decay (p -= lr x wd x p), SGD's L2 term (wd x p added "
        "to the gradient, as torch.optim.SGD); 0: none")
      .range(0, 1);
  o.add("workload.lr_scaling", "--lr-scaling", c.lr_scaling,
        "Scale the lr schedule with the data-parallel size: none, linear (x dp) or sqrt "
        "(x sqrt(dp))")
      .choices({"none", "linear", "sqrt"});
  o.add("workload.warmup_steps", "--warmup-steps,--warmup", c.warmup_steps,
        "Learning-rate warm-up steps")
      .range(0, 1000000);
  o.add("workload.warmup_style", "--warmup-style", c.warmup_style,
        "linear (ramp up to the peak), constant (the unscaled lr during the warm-up) or none")
      .choices({"linear", "constant", "none"});
}

void data_options(worker::Options& o, TrainArgs& a) {
  auto& c = a.cfg;
  o.section("workload.data", "Synthetic corpus and sampler");
  o.add("workload.data.samples", "--samples", a.samples, "Dataset size (0: the trainer's default)")
      .range(0, 1e9);
  o.add_flag("workload.data.drop_last", "--drop-last", c.drop_last,
             "Drop the uneven tail (real frameworks default to false)");
  o.add("workload.data.seed", "--data-seed", c.data_seed, "Data seed (0: the scenario seed)")
      .range(0, 4294967295.0)
      .scenario_default("0");
  o.add_flag("workload.activation_checkpointing", "--activation-checkpointing",
             c.activation_checkpointing,
             "Recompute each block's forward during the backward instead of keeping its "
             "activations (each block a reentrant checkpoint: differentiated in a pass of its "
             "own)");
  o.add("workload.freeze", "--freeze", c.freeze,
        "Parameters whose requires_grad is False, as fnmatch patterns over their state-dict names "
        "(blocks.0.*, wte.weight): no gradient, not in the optimizer; a rank left with none to "
        "train fails as torch.optim does ('optimizer got an empty parameter list')");
  o.add_flag("workload.pair_loss", "--pair-loss", c.pair_loss,
             "Each two micro-batches are a pair whose losses are summed before one backward (a "
             "Siamese model's two inputs, DPO's chosen and rejected sequences); grad_accum must "
             "be even");
}

// The model's structure (docs/workloads.md#structure): tied embeddings, vocab-parallel wte and
// head with Megatron's vocabulary padding, and the head's output.
void structure_options(worker::Options& o, TrainArgs& a) {
  auto& s = a.structure;
  o.section("workload.structure", "How the vocabulary's two matrices are built and split");
  o.add("workload.structure.tie_embeddings", "--tie-embeddings", s.tie_embeddings,
        "One tensor for wte and the LM head (the state dict lists it as wte.weight and its alias "
        "lm_head.weight); over pipeline stages the last stage holds a copy whose gradients are "
        "summed with wte's over the embedding group");
  o.add("workload.structure.vocab_parallel", "--vocab-parallel", s.vocab_parallel,
        "Split wte and the LM head by vocabulary rows over the TP ranks (Megatron's "
        "VocabParallelEmbedding and column-parallel head)");
  o.add("workload.structure.make_vocab_size_divisible_by", "--make-vocab-size-divisible-by",
        s.divisible_by,
        "Pad the vocabulary to a multiple of this x the vocabulary shards (TP size under "
        "vocab_parallel), as Megatron's _vocab_size_with_padding")
      .range(1, 1 << 20);
  o.add("workload.structure.padded_vocab", "--padded-vocab-size", s.padded_vocab,
        "The padded vocabulary size itself (as a checkpoint's args carry it); 0: computed")
      .range(0, 1 << 24);
  o.add("workload.structure.parallel_output", "--parallel-output", s.parallel_output,
        "vocab_parallel: keep the logits sharded over TP (vocab-parallel cross entropy); false "
        "all-gathers the full [tokens, vocab] logits on every TP rank first");
}

// Mixture of Experts (docs/workloads.md#mixture-of-experts): DeepSpeed's MoE layer options.
void moe_options(worker::Options& o, TrainArgs& a) {
  auto& m = a.moe;
  o.section("workload.moe", "Mixture-of-Experts blocks, router and expert parallelism");
  o.add("workload.moe.experts", "--moe-experts", m.experts,
        "Experts per MoE block (0: every block dense)")
      .range(0, 4096);
  o.add("workload.moe.top_k", "--moe-top-k", m.top_k, "Experts each token is routed to (1 or 2)")
      .range(1, 64);
  o.add("workload.moe.ep_size", "--moe-ep-size", m.ep_size,
        "Expert-parallel size: consecutive data-parallel ranks that split the experts and "
        "exchange tokens with an all-to-all (must divide the experts and dp)")
      .range(1, 4096);
  o.add("workload.moe.capacity_factor", "--moe-capacity-factor", m.capacity_factor,
        "Tokens an expert takes: ceil(tokens / experts x factor (x2 for top-2)); the rest are "
        "dropped")
      .range(0, 1e6);
  o.add("workload.moe.min_capacity", "--moe-min-capacity", m.min_capacity,
        "Smallest expert capacity (DeepSpeed's min_capacity)")
      .range(0, 1e6);
  o.add("workload.moe.drop_tokens", "--moe-drop-tokens", m.drop_tokens,
        "Drop tokens past the capacity; false: the capacity is the largest expert load, "
        "all-reduced (max) over the EP group");
  o.add("workload.moe.interval", "--moe-interval", m.interval,
        "Blocks whose 1-based number is a multiple of this are MoE (Megatron-DeepSpeed's "
        "--expert-interval; 1: every block)")
      .range(1, 4096);
  o.add("workload.moe.aux_loss_coef", "--moe-aux-loss-coef", m.aux_loss_coef,
        "Weight of the load-balancing loss in the objective")
      .range(0, 1e3);
  o.add("workload.moe.dropless", "--moe-dropless", m.dropless,
        "Mixtral's sparse block: no capacity, every routed token computed, an expert that "
        "receives no token skipped (its weights untouched); ep_size 1");
  o.add("workload.moe.gate_ep_group", "--moe-gate-ep-group", m.gate_ep_group,
        "The gate knows its expert-parallel group (DeepSpeed's set_deepspeed_parallelism); "
        "false: drop_tokens false takes each rank's own largest load as the capacity");
  o.add("workload.moe.z3_leaf", "--moe-z3-leaf", m.z3_leaf,
        "ZeRO-3: the MoE block is a leaf module (deepspeed.utils.set_z3_leaf_modules): every "
        "expert is gathered when the block runs, not each one as a token reaches it");
}

// torch's DistributedDataParallel around the model (zero 0's reducer, zero_step.cpp).
void ddp_options(worker::Options& o, TrainArgs& a) {
  auto& c = a.cfg;
  o.section("workload.ddp", "torch's DistributedDataParallel around the model (zero 0)");
  o.add_flag("workload.ddp.wrapper", "--ddp", c.ddp_wrapper,
             "Zero 0 as torch's DistributedDataParallel: its reducer all-reduces only buckets "
             "whose parameters all got a gradient, and a step that leaves some without one fails "
             "the next step ('Expected to have finished reduction in the prior iteration'); "
             "false: the engine all-reduces every gradient after the backward, as DeepSpeed's");
  o.add_flag("workload.ddp.find_unused_parameters", "--find-unused-parameters",
             c.find_unused_parameters,
             "DistributedDataParallel(find_unused_parameters=True): parameters the backward never "
             "reached are marked ready with zero gradients (torch leaves their grad None; here "
             "the optimizer still decays them)");
}

void zero_options(worker::Options& o, TrainArgs& a) {
  auto& c = a.cfg;
  o.section("workload.zero", "ZeRO knobs (topology.zero picks the stage)");
  o.add_flag("workload.zero.init", "!--no-zero-init", c.zero_init,
             "Stage 3: build each rank's partition directly (deepspeed.zero.Init); false "
             "materialises the whole model on every rank first");
  o.add_flag("workload.zero.offload_optimizer", "--offload-optimizer", c.offload_optimizer,
             "Master weights and Adam moments of the rank's partition on the host, charged to the "
             "host budget (FAULTLINE_HOST_MEMORY_BUDGET_BYTES); stage 1-3 only");
  o.add("workload.zero.offload_param", "--offload-param", c.offload_param,
        "ZeRO-Infinity's parameter offload (offload_param.device): none, or nvme (stage 3 under "
        "fp16/bf16: each parameter's piece of the rank's 16-bit partition lives in a swap file "
        "under nvme_path, written after every update and read back when its group is gathered, "
        "through DeepSpeed's async I/O as workload.versions.deepspeed had it)")
      .choices({"none", "nvme"});
  o.add("workload.zero.nvme_buffer_count", "--nvme-buffer-count", c.nvme_buffer_count,
        "offload_param.buffer_count: swap-in buffers; a swapped piece read back at a gather "
        "holds one until its group is released (prefetched and resident groups keep theirs), "
        "and a gather that needs more than are free fails with DeepSpeed's 'Not enough "
        "buffers'")
      .range(1, 1e6);
  o.add("workload.zero.nvme_buffer_size", "--nvme-buffer-size", c.nvme_buffer_size,
        "offload_param.buffer_size: elements per swap-in buffer (at least the largest swapped "
        "piece)")
      .range(1, 1e12);
  o.add("workload.zero.nvme_path", "--nvme-path", c.nvme_path,
        "offload_param.nvme_path: the swap folder, relative to the rank's directory (the "
        "default, ../../nvme, is the run directory's nvme/, which the ranks share as a node's "
        "NVMe drive); the swap files are "
        "nvme_path/zero_stage_3/<dtype>params/rank<R>/<ds_id>_param.tensor.swp");
  o.add("workload.zero.reduce_bucket_size", "--reduce-bucket-size", c.bucket_bytes,
        "Gradient bucket in bytes (0: 1 MiB or the model if smaller); under the gemini "
        "reducer, GeminiDDP's chunk size")
      .range(0, 1e12);
  o.add("workload.zero.reducer", "--zero-reducer", c.zero_reducer,
        "Stage 2's gradient reduction: deepspeed (a bucket is reduced when its last group's "
        "hook fires; a parameter without a gradient counts as zero) or gemini (Colossal-AI's "
        "GeminiDDP with shard_param_frac 0.0: the buckets are its chunks, each reduced once all "
        "its parameters have a gradient; a chunk the forward used that is left unreduced fails "
        "the backward with 'ZERO DDP error: the synchronization of gradients doesn't exit "
        "properly')")
      .choices({"deepspeed", "gemini"});
  o.add_flag("workload.zero.deepcompile", "--deepcompile", c.deepcompile,
             "\"compile\": {\"deepcompile\": true}: engine.compile() after initialize. At stage 3 "
             "its set-up (init_z3) looks up the optimizer's gradient partition of every "
             "parameter, which DeepSpeed before 0.19.6 also does for frozen ones (KeyError: the "
             "first frozen parameter's ds_id; workload.versions.deepspeed). The compiled graph's "
             "schedule is not modelled: steps run as the eager engine's");
  o.add("workload.zero.allgather_bucket_size", "--allgather-bucket-size", c.allgather_bucket_bytes,
        "Stages 1-2: bytes all-gathered per round of the updated parameters (0: 1 MiB or the "
        "model)")
      .range(0, 1e12);
  o.add("workload.zero.prefetch_bytes", "--zero3-prefetch-bytes", c.zero3_prefetch_bytes,
        "Stage 3: gather groups this many bytes ahead (-1: 262144 parameters, 1 MiB in fp32; 0: "
        "off)")
      .range(-1, 1e12);
  o.add("workload.zero.max_live_bytes", "--zero3-max-live-bytes", c.zero3_max_live_bytes,
        "Stage 3: keep gathered groups resident while they total at most this (-1 or 0: free "
        "each after use)")
      .range(-1, 1e12);
  o.section("workload.zero.aio", "DeepSpeed's \"aio\" settings of the NVMe swap files");
  o.add("workload.zero.aio.block_size", "--aio-block-size", c.aio_block_size,
        "aio.block_size: bytes per I/O request (the last request of a file holds the rest)")
      .range(1, 1e9);
  o.add("workload.zero.aio.thread_count", "--aio-thread-count", c.aio_thread_count,
        "aio.thread_count (intra_op_parallelism from DeepSpeed 0.16.4): the swap buffers are "
        "padded to 1024 bytes times this (DeepSpeed 0.4.0 on)")
      .range(1, 64);
}

void checkpoint_options(worker::Options& o, TrainArgs& a) {
  auto& c = a.cfg;
  o.section("workload.checkpoint", "Sharded checkpoints in the run directory");
  o.add("workload.checkpoint.every", "--save-every", c.save_every,
        "Checkpoint every N steps (0: never)")
      .range(0, 1e9);
  o.add("workload.checkpoint.key_prefix", "--save-key-prefix", c.save_key_prefix,
        "Prefix on every state-dict key a save writes (checkpoints and model files), as saving a "
        "wrapper's state_dict() leaves it (DistributedDataParallel: 'module.', torch.compile: "
        "'_orig_mod.'; empty: the model's own keys)");
  o.add("workload.checkpoint.strip_prefix", "--strip-key-prefix", c.strip_key_prefix,
        "Prefix stripped from the checkpoint's or model file's keys before the load "
        "(consume_prefix_in_state_dict_if_present; empty: none)");
  o.add("workload.checkpoint.strict", "--load-strict", c.load_strict,
        "load_state_dict(strict): missing or unexpected keys fail the load; false loads the keys "
        "that match and reports the rest");
  o.add("workload.checkpoint.unpad_vocab", "--unpad-vocab", c.unpad_vocab,
        "A save lists wte and lm_head with the vocabulary's own rows, the padding stripped after "
        "gathering them (Colossal-AI's save); false keeps the padded rows, as Megatron's do");
  o.add("workload.checkpoint.save_aliases", "--save-aliases", c.save_aliases,
        "A save lists a tied tensor under every name, as torch's state_dict() does; false writes "
        "it once (safetensors' save_model, save_pretrained), without lm_head.weight");
  o.add("workload.checkpoint.shard_name", "--shard-name", c.shard_name,
        "The number in a shard's file name: rank (global) or local_rank (within its node: ranks "
        "of different nodes write one file of the shared save directory, the last one wins)")
      .choices({"rank", "local_rank"});
  o.add("workload.checkpoint.load_into", "--load-into", c.load_into,
        "How a resume loads the weights: engine (each rank its own shard, engine.load_checkpoint), "
        "module (model.load_state_dict of the full state dict on every rank; ZeRO-3's size-0 "
        "placeholders refuse it) or gathered (inside GatheredParameters(modifier_rank), "
        "data-parallel rank 0 loads). A load_model_file is read into the whole model's shapes "
        "unless this is module")
      .choices({"engine", "module", "gathered"});
  o.add("workload.checkpoint.modifier_rank", "--modifier-rank", c.modifier_rank,
        "GatheredParameters' modifier_rank for load_into gathered: the data-parallel rank whose "
        "values are broadcast on exit (-1: None, the changes are dropped)")
      .range(-1, 1e6);
  o.add("workload.checkpoint.model_file", "--save-model-file", c.model_file,
        "A model file (safetensors layout, keyed by name) beside each checkpoint, written by "
        "rank 0: none, state_dict (model.state_dict() as the module holds it: ZeRO-3's size-0 "
        "placeholders) or gathered_16bit (save_16bit_model with "
        "stage3_gather_16bit_weights_on_model_save: the full weights in the module's dtype)")
      .choices({"none", "state_dict", "gathered_16bit"});
  o.add("workload.checkpoint.gathered_release", "--gathered-release", c.gathered_release,
        "gathered_16bit under ZeRO-3, which gathers one module at a time: on_exit (each "
        "module's gathered weights are re-partitioned as its GatheredParameters exits, DeepSpeed "
        "PR 1223) or next_use (they stay on the device until the next forward uses them, as with "
        "modifier_rank=None before it: the whole model is gathered at the end of the save)")
      .choices({"on_exit", "next_use"});
  o.add("workload.checkpoint.load_model_file", "--load-model-file", c.load_model_file,
        "A model file a fresh run loads its weights from by name (empty: none)");
  o.add(
      "workload.checkpoint.load_shard_spec", "--load-shard-spec", c.load_shard_spec,
      "How the model file reaches the ranks: empty (every rank reads it) or GROUP:DIM:PARTS "
      "(group world or dp; the group's rank 0 reads it and broadcasts each tensor in PARTS shards "
      "along DIM 0 or 1), optionally followed by ,rN=GROUP:DIM:PARTS for world rank N");
  o.section("workload.eval_data", "Evaluation set (eval_every > 0)");
  o.add("workload.eval_data.samples", "--eval-samples", c.eval_samples,
        "Evaluation set size (0: 2 full micro-batches per data-parallel rank)")
      .range(0, 1e9);
  o.add_flag("workload.eval_data.drop_last", "--eval-drop-last", c.eval_drop_last,
             "Drop the evaluation set's uneven tail and partial last batch; without it ranks can "
             "get different numbers of evaluation batches, each batch's loss being all-reduced");
}

// The job's tokenizer (docs/workloads.md#tokenizer): Megatron's --tokenizer-type and the files
// each type reads; its vocabulary replaces the model preset's.
void tokenizer_options(worker::Options& o, TrainArgs& a) {
  auto& t = a.tokenizer;
  o.section("workload.tokenizer",
            "The tokenizer the job builds at start (Megatron's build_tokenizer); its vocabulary "
            "sizes the embedding");
  o.add("workload.tokenizer.type", "--tokenizer-type", t.type,
        "none (the model preset's vocabulary), GPT2BPETokenizer (vocab_file and merge_file), "
        "HuggingFaceTokenizer (tokenizer_model: tokenizer.json or its folder) or NullTokenizer "
        "(vocab_size ids and an end-of-document id)")
      .choices({"none", "GPT2BPETokenizer", "HuggingFaceTokenizer", "NullTokenizer"});
  o.add("workload.tokenizer.vocab_file", "--vocab-file", t.vocab_file,
        "--vocab-file: a vocab.json, relative to the tokenizer folder the harness writes (it "
        "holds vocab.json, merges.txt and tokenizer.json for the data's vocabulary); empty: not "
        "passed");
  o.add("workload.tokenizer.merge_file", "--merge-file", t.merge_file,
        "--merge-file: a merges.txt in that folder; empty: not passed");
  o.add("workload.tokenizer.tokenizer_model", "--tokenizer-model", t.tokenizer_model,
        "--tokenizer-model: tokenizer.json, or . for the folder; empty: not passed");
  o.add("workload.tokenizer.vocab_size", "--vocab-size", t.vocab_size,
        "--vocab-size: NullTokenizer's ids (its end-of-document id comes after them); 0: not "
        "passed")
      .range(0, 1 << 24);
}

// Options no scenario key sets: layout (the harness passes the topology), recovery, output.
void command_line_options(CLI::App& app, TrainArgs& a) {
  auto& c = a.cfg;
  app.add_option("--vocab", a.vocab, "Override the vocabulary size");
  app.add_option("--dp", c.layout.dp, "Data-parallel size");
  app.add_option("--tp", c.layout.tp, "Tensor-parallel size");
  app.add_option("--pp", c.layout.pp, "Pipeline-parallel size");
  app.add_option("--zero", c.layout.zero, "ZeRO stage 0-3");
  app.add_option("--epochs", c.epochs, "Run whole epochs instead of --steps");
  app.add_option("--tokenizer-dir", a.tokenizer.dir,
                 "Folder the tokenizer's relative file names are looked up in (the harness "
                 "passes the run's tokenizer/ folder when workload.tokenizer.type is set)");
  app.add_option("--data-vocab", c.data_vocab,
                 "Vocabulary of the data pipeline's tokenizer (0: the model's)");
  app.add_flag("--seed-per-rank", c.seed_per_rank,
               "Initialise each rank's weights with seed + rank");
  app.add_flag("--broadcast-init", c.broadcast_init,
               "Broadcast data-parallel rank 0's initial weights to its replicas");
  app.add_option("--check-replicas-every", c.check_replicas_every,
                 "Compare parameter hashes across data-parallel replicas (and a tied embedding "
                 "with its last-stage copy) every N steps");
  app.add_flag("--consecutive-hysteresis", c.loss_scale.consecutive_hysteresis,
               "Restore the hysteresis after every clean step (not only when the scale grows)");
  app.add_option("--eval-batches", c.eval_batches, "Micro-batches per evaluation");
  app.add_flag("--memory-report", a.memory_report,
               "Print every rank's peak memory per category (params, grads, optimizer, "
               "activations, buffers, gathers) at the end");
  app.add_option("--save-dir", c.save_dir, "Write sharded checkpoints under this directory");
  app.add_option("--resume", c.resume, "Resume from a checkpoint (step dir or save dir)");
  app.add_option("--auto-resume", a.auto_resume,
                 "Resume from DIR's latest checkpoint when there is one, else start fresh");
  app.add_flag("--resume-scan", a.resume_scan,
               "--auto-resume without a 'latest' file: take the newest complete step_<N>");
  app.add_option("--metrics", a.metrics_path, "Write per-step metrics as JSON lines (rank 0)");
  app.add_option("--skip-batches", a.skip_batches, "Steps whose batches are skipped (recovery)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--reset-loss-scale", c.reset_loss_scale,
               "Reset the fp16 loss scale to its initial value after resuming (recovery)");
  app.add_flag("--checksum", a.checksum, "Print every rank's parameter checksum at the end");
}

}  // namespace

void declare_train_options(worker::Runtime& rt, TrainArgs& a) {
  rt.add_model_options();
  rt.add_runtime_options();
  optimizer_options(rt.options(), a);
  data_options(rt.options(), a);
  zero_options(rt.options(), a);
  checkpoint_options(rt.options(), a);
  ddp_options(rt.options(), a);
  structure_options(rt.options(), a);
  moe_options(rt.options(), a);
  tokenizer_options(rt.options(), a);
  command_line_options(rt.app(), a);
}

void finish_train_options(const worker::Runtime& rt, TrainArgs& a) {
  a.cfg.skip_steps.insert(a.skip_batches.begin(), a.skip_batches.end());
  a.cfg.model = rt.model_config(a.vocab);
  a.cfg.model.structure = a.structure;
  a.cfg.model.moe = a.moe;
  if (a.samples > 0) a.cfg.num_samples = a.samples;
  a.cfg.precision = *parse_dtype(a.precision);
}

}  // namespace fl::train
