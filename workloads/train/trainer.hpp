// The trainer: micro-batches and gradient accumulation, pipeline schedules (GPipe, 1F1B),
// data-parallel gradient averaging in buckets or ZeRO-partitioned (stages 1-3), mixed precision
// with dynamic loss scaling, warm-up + cosine learning rate, global-norm clipping, periodic eval,
// and per-step metrics handed to a sink. One config struct; every rank runs the same code.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/loss_scaler.hpp"
#include "kernels/tensor.hpp"
#include "workloads/model/gpt.hpp"
#include "workloads/parallel/expert.hpp"
#include "workloads/parallel/topology.hpp"
#include "workloads/parallel/zero.hpp"
#include "workloads/train/data.hpp"
#include "workloads/train/muon.hpp"
#include "workloads/train/optimizer_wrapper.hpp"

namespace fl::train {

struct NamedLoad;  // checkpoint.hpp

FAULTLINE_SETTING(kGemmPrecision, std::string, "FAULTLINE_GEMM_PRECISION", "auto",
                  "GEMMs of a CUDA rank: auto (with --precision fp16|bf16, 16-bit tensor-core "
                  "GEMMs with fp32 accumulation; fp32 otherwise) or fp32 (fp32 SGEMMs always). "
                  "CPU ranks compute fp32 GEMMs");

// The operand format of a rank's GEMMs (fl::ops::set_gemm_precision) for a training precision, a
// device and a FAULTLINE_GEMM_PRECISION value: 16-bit on a CUDA device under fp16/bf16 with
// "auto", fp32 otherwise. ConfigError for a value other than auto/fp32, and for bf16 GEMMs on a
// GPU older than compute capability 8.0 (naming the options that work there).
DType gemm_precision_for(DType precision, Device device, const std::string& setting);

struct TrainConfig {
  model::GptConfig model;
  model::Layout layout;
  int micro_batch = 4;  // samples per micro-batch on each data-parallel rank
  int grad_accum = 1;   // micro-batches per step (the pipeline's micro-batches)
  // When ZeRO 0-1 all-reduce the data-parallel gradients under gradient accumulation: "step",
  // once after the step's last micro-batch (DeepSpeed's accumulation boundary, DDP's no_sync()
  // on the others); "micro_batch", after every micro-batch's backward, as a training loop whose
  // no_sync guard does nothing for its wrapper: the same sum up to rounding, grad_accum times the
  // gradient traffic (the experts' over their EDP group too).
  std::string grad_sync = "step";
  // DeepSpeed's data_types.grad_accum_dtype: "" (its default), fp32, fp16, bf16; picks the
  // optimizer wrapper (workloads/train/optimizer_wrapper.hpp).
  std::string grad_accum_dtype;
  // DeepSpeed's train_batch_size: 0 derives it (micro_batch x grad_accum x dp, as DeepSpeed fills
  // in a missing one); a value must be that product, else the init refuses it in DeepSpeed's words.
  int train_batch_size = 0;
  int64_t steps = 20;  // steps to run when epochs == 0
  int epochs = 0;      // > 0: run whole epochs of this rank's shard instead of `steps`
  int64_t num_samples = 4096;
  bool drop_last = false;
  bool shuffle = true;
  uint64_t data_seed = 7;
  float lr = 1e-2f;
  float min_lr = 1e-3f;
  int warmup_steps = 5;
  int64_t decay_steps = 0;  // cosine decay length; 0 = steps
  float grad_clip = 1.0f;   // 0 = off
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.95f;
  // The optimizer: "adamw", "sgd" (torch.optim.SGD: with momentum > 0 a momentum buffer, none
  // without) or "muon" (DeepSpeed's MuonWithAuxAdam, muon.hpp). Its state is partitioned by ZeRO
  // like AdamW's moments (optimizer_state_bytes); Muon's momentum is held whole on every rank.
  std::string optimizer = "adamw";
  float momentum = 0.0f;  // sgd's momentum, Muon's beta (0: DeepSpeed's 0.95)
  // The learning-rate schedule scaled with the data-parallel size (the global batch): "none",
  // "linear" (lr and min_lr × dp, Goyal et al.'s linear scaling rule) or "sqrt" (× sqrt(dp)).
  std::string lr_scaling = "none";
  // How the first warmup_steps run: "linear" (ramp up to the peak), "constant" (the unscaled lr,
  // Goyal et al.'s constant warm-up) or "none" (the peak from the first step).
  std::string warmup_style = "linear";
  DType precision = DType::kF32;  // fp32, fp16 (with loss scaling) or bf16
  LossScalerConfig loss_scale;
  int eval_every = 0;
  int eval_batches = 2;
  // The evaluation set: its own size (0: eval_batches full micro-batches per data-parallel rank)
  // and drop_last. Without drop_last a size that does not divide leaves ranks with different
  // numbers of evaluation batches (the last one partial), and each batch's loss is all-reduced.
  int64_t eval_samples = 0;
  bool eval_drop_last = false;
  std::string schedule = "1f1b";  // or "gpipe"
  size_t bucket_bytes = 0;        // gradient bucket (reduce_bucket_size); 0: 1 MiB or the model
  // ZeRO knobs (workloads/parallel/zero.hpp): the all-gather piece of stages 1-2, stage 3's
  // prefetch and resident-gather cap, partitioned construction, optimizer offload.
  size_t allgather_bucket_bytes = 0;
  int64_t zero3_prefetch_bytes = -1;  // -1: unset (see parallel::ZeroConfig)
  int64_t zero3_max_live_bytes = -1;
  // ZeRO-3 only: build each rank's parameter partition directly (like deepspeed.zero.Init)
  // instead of materialising the whole model first and then keeping a slice.
  bool zero_init = true;
  bool offload_optimizer = false;
  // workload.zero.offload_param: "none" or "nvme" (ZeRO-Infinity's parameter swap files,
  // parallel::NvmeParamSwapper), under nvme_path, through DeepSpeed's aio settings.
  std::string offload_param = "none";
  std::string nvme_path = "../../nvme";  // the run directory's nvme/
  size_t aio_block_size = 1048576;
  int aio_thread_count = 1;
  int nvme_buffer_count = 5;            // offload_param.buffer_count
  size_t nvme_buffer_size = 100000000;  // offload_param.buffer_size (elements)
  // workload.zero.reducer: "deepspeed" (DeepSpeed's ZeRO buckets) or "gemini" (Colossal-AI's
  // GeminiDDP chunks over ZeRO-2's layout; parallel::ZeroConfig::gemini).
  std::string zero_reducer = "deepspeed";
  // workload.freeze: fnmatch patterns over state-dict names of parameters whose requires_grad is
  // False (workloads/train/freeze.hpp).
  std::vector<std::string> freeze;
  // workload.zero.deepcompile: "compile": {"deepcompile": true}, engine.compile() after
  // deepspeed.initialize (only ZeRO-3's set-up, init_z3's gradient-partition lookup, is modelled).
  bool deepcompile = false;
  // workload.grad_norm: "flat", "dtensor_stack" or "dtensor_per_mesh" (grad_norm.hpp).
  std::string grad_norm = "flat";
  bool ddp_wrapper = false;             // workload.ddp.wrapper
  bool find_unused_parameters = false;  // workload.ddp.find_unused_parameters
  // Recompute each block's forward during the backward instead of keeping its activations.
  bool activation_checkpointing = false;
  // Each two micro-batches are a pair whose losses are summed before one backward (a Siamese
  // model's two inputs, DPO's chosen and rejected sequences; pair_step.cpp).
  bool pair_loss = false;
  // Token ids the data pipeline produces (its tokenizer's vocabulary); 0: the model's vocab.
  int data_vocab = 0;
  // Seed each rank's initial weights with seed + rank, as scripts that seed every process
  // differently do; broadcast_init copies data-parallel rank 0's weights to its replicas
  // after initialisation (ZeRO 0-2), which makes that harmless.
  bool seed_per_rank = false;
  bool broadcast_init = false;
  // Every N steps, compare an xxh64 of the parameters across data-parallel replicas and fail
  // when they differ (like Megatron's weight-hash check); 0: never.
  int check_replicas_every = 0;
  std::string save_dir;  // checkpoints go to save_dir/step_<N>/ (empty: never saved)
  int save_every = 0;    // save after every N steps (and after the last); 0: only after the last
  std::string resume;    // a step_<N> directory, or a save_dir with a `latest` file, to resume from
  // Named state dicts (docs/workloads.md#state-dicts): the prefix a save puts on every key (what
  // saving a wrapper's state_dict() does: DDP's "module."), the prefix a load strips first
  // (consume_prefix_in_state_dict_if_present), and whether the load is strict.
  std::string save_key_prefix, strip_key_prefix;
  bool load_strict = true;
  // Whether a save lists a tied tensor under its alias too (lm_head.weight), as torch's
  // state_dict() does; false writes each tensor once, as safetensors' save_model does.
  bool save_aliases = true;
  // The number in a shard's file name: "rank" (the global rank) or "local_rank" (the rank within
  // its node: the flaw of a saver written for one node, whose ranks of different nodes then write
  // one file of a shared directory, the last writer winning).
  std::string shard_name = "rank";
  // Whether a save strips the vocabulary padding from wte and lm_head (gathered, then unpadded,
  // as Colossal-AI's checkpoint IO does) or keeps it (Megatron's checkpoints hold padded rows).
  bool unpad_vocab = false;
  // How a resume puts the weights in (docs/workloads.md#zero-3-state-dicts): "engine" (each rank
  // reads its own shard, as DeepSpeed's engine.load_checkpoint), "module" (every rank calls
  // model.load_state_dict with the full state dict: ZeRO-3's placeholders refuse it) or
  // "gathered" (inside GatheredParameters(modifier_rank), data-parallel rank 0 loads, as
  // transformers' zero-3 load does). The optimizer state loads as the engine's either way.
  std::string load_into = "engine";
  int modifier_rank = 0;  // -1: None
  // A model file beside each checkpoint (model_file.cpp, docs/workloads.md#model-files): "none",
  // "state_dict" (rank 0 writes model.state_dict() as its module holds it: ZeRO-3's size-0
  // placeholders) or "gathered_16bit" (DeepSpeed's save_16bit_model with
  // stage3_gather_16bit_weights_on_model_save: the full parameters gathered on rank 0).
  std::string model_file = "none";
  // gathered_16bit under ZeRO-3: when each module's gathered weights leave the device. "on_exit"
  // (DeepSpeed PR 1223): as its GatheredParameters context exits; "next_use" (before it, with
  // modifier_rank=None): only when the next forward uses them, so the whole model stays gathered
  // after the save.
  std::string gathered_release = "on_exit";
  // A model file whose weights a fresh run starts from (empty: none), and how it reaches the
  // ranks: "" (every rank reads it) or a sharding spec "GROUP:DIM:PARTS[,rN=GROUP:DIM:PARTS]"
  // (the group's rank 0 reads it and broadcasts each tensor's PARTS shards along DIM).
  std::string load_model_file, load_shard_spec;
  // Recovery knobs: steps whose batches are consumed without training on them (a bad batch),
  // and a loss scale reset to its initial value after resuming (a collapsed fp16 scaler).
  std::set<int64_t> skip_steps;
  bool reset_loss_scale = false;
};

// The optimizer state bytes per parameter (ZeRO's K): 8 for AdamW (two fp32 moments), 4 for
// SGD with momentum (one fp32 buffer), 0 for plain SGD.
int optimizer_state_bytes(const TrainConfig& cfg);
// ConfigError naming the option and what is allowed for an unknown optimizer, lr scaling rule or
// warm-up style, a momentum without --optimizer sgd or outside [0, 1), a negative warm-up, or a
// loss-scaler setting out of range.
void validate_numerics(const TrainConfig& cfg);
// Stop 63 (--check-layout): the checks a rank's Trainer makes of its configuration before it
// allocates anything, for every rank of `layout` without a world: the numerics, the DDP wrapper's
// layouts, and the ZeRO engine's options against each rank's share of the model (bucket sizes).
void validate_before_world(const TrainConfig& cfg, const model::Layout& layout);
// workload.pair_loss: pairs of micro-batches (grad_accum even) and no pipeline (ConfigError).
void check_pair_loss(const TrainConfig& c, const model::Layout& l);
// The learning rate of `step` (0-based) for a data-parallel size `dp`: warm-up, then cosine decay
// from the (scaled) peak to the (scaled) min_lr.
float scheduled_lr(const TrainConfig& cfg, int dp, int64_t step);

struct StepMetrics {
  int64_t step = 0;
  int epoch = 0;
  float loss = 0;
  std::optional<float> eval_loss;
  float grad_norm = 0;
  float lr = 0;
  float loss_scale = 1;
  bool skipped = false;
  int64_t skipped_total = 0;
  double step_time_s = 0;
  // Since the previous step ended (data loading, evaluation and checkpoints included), and the
  // part of it spent inside collectives: interval_s - comm_s is the time the rank computed.
  double interval_s = 0;
  double comm_s = 0;
  // Each collective's time in the step, in order (nullopt: more than the communicator keeps).
  std::optional<std::vector<double>> comm_op_s;
  double tokens_per_s = 0;
  size_t mem_current = 0;
  size_t mem_peak = 0;
  // Where the step's time went, from its start (forward and backward per micro-batch, the
  // gradients' reduction and norm, the optimizer; at most kMaxPhases), and how long after the
  // step its metrics were reported (an evaluation, a replica check in between): what
  // `faultline trace` draws inside the step.
  struct Phase {
    const char* name;
    double start_s, dur_s;
  };
  static constexpr size_t kMaxPhases = 32;
  std::vector<Phase> phases;
  std::chrono::steady_clock::time_point started, ended;
  double reported_after_s = 0;
};

using MetricsSink = std::function<void(const StepMetrics&)>;
// A section of the run begins (true) or ends: "setup", "eval", "checkpoint" (NVRx's names, as the
// probe's fl_probe_section sends them).
using SectionSink = std::function<void(const char* name, bool begin)>;

class Trainer {
 public:
  Trainer(TrainConfig cfg, parallel::Topology& topo, MemoryAccountant& acct);

  void set_metrics_sink(MetricsSink sink) { sink_ = std::move(sink); }
  void set_section_sink(SectionSink sink) { section_sink_ = std::move(sink); }
  // Runs the configured steps or epochs; returns every step's metrics (identical on all ranks).
  std::vector<StepMetrics> run();

  // This rank's full fp32 parameters (its TP shard of its stage); under ZeRO-3 they are
  // gathered across the data-parallel group first (collective).
  std::vector<float> full_parameters() const;
  const model::ParamLayout& layout() const { return layout_; }
  const parallel::ZeroEngine& zero() const { return *zero_; }

  // Sharded checkpoint of the current state (collective): every rank writes its shard
  // atomically, rank 0 then writes the manifest and the `latest` pointer. Returns the directory.
  std::string save_checkpoint(const std::string& save_dir);
  // Restores parameters, optimizer, loss scaler and data position from `dir` (collective),
  // validating format version, layout, shard presence and checksums first.
  void load_checkpoint(const std::string& dir);
  const TrainConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  // Steps this rank will run: `steps`, or with epochs the batches its shard gives (before any
  // data-loader fault changes the shard).
  int64_t planned_steps() const;
  // The loss of one evaluation (collective: one all-reduce per evaluation batch); nullopt when
  // the evaluation set gives this rank no batch.
  std::optional<float> evaluate();
  // The format of this rank's GEMM operands (gemm_precision_for), set around every forward and
  // backward.
  DType gemm_precision() const { return gemm_precision_; }

 private:
  struct MicroBatch {
    std::vector<int32_t> tokens, targets;
    int B = 0;
  };
  struct RunLog;
  // run()'s parts: whole epochs of the shard, or `steps` steps from the data position (after
  // the resume's load call); each finished step is evaluated, checked and logged by finish_step.
  void run_epochs(RunLog& log);
  void run_steps(RunLog& log);
  void finish_step(StepMetrics m, int epoch, RunLog& log);
  // The next step's micro-batches from `idx` at pos_, moving to the next epoch when it runs out.
  std::vector<MicroBatch> next_batches(std::vector<int64_t>& idx);
  StepMetrics train_step(const std::vector<MicroBatch>& mbs);
  // train_step's parts: whether the owned gradients overflow and their sum of squares (divided
  // by `scale`), judged one fp32 chunk at a time; the optimizer's update of them (clipped by
  // m.grad_norm, unscaled), chunk by chunk behind the optimizer.step site. The MoE experts' own
  // engine joins both (its chunks judged with the dense ones, updated after them).
  struct GradJudgement {
    int32_t overflow = 0;
    double dense_sq = 0, expert_sq = 0;  // the experts' already multiplied as the norm divides
    // dtensor_per_mesh under tp > 1: the dense sums of the tensor-parallel shards and of the
    // replicated parameters (every TP rank's), one per mesh.
    double sharded_sq = 0, replicated_sq = 0;
  };
  GradJudgement judge_gradients(float scale);
  // The squared global norm from the judged sums (workload.grad_norm; grad_norm.hpp): every
  // rank's sums all-reduced, once over the world or once per device mesh.
  double global_sq_norm(const GradJudgement& j);
  bool expert_parallel() const { return experts_ && cfg_.model.moe.ep_size > 1; }
  void apply_update(const StepMetrics& m, float scale);
  float forward_backward(const std::vector<MicroBatch>& mbs, bool backward);
  // forward_backward under pair_loss (pair_step.cpp): the loss summed over the forwards.
  double pair_forward_backward(const std::vector<MicroBatch>& mbs, bool backward, float dloss);
  void check_replicas() const;
  // Tied embeddings over pipeline stages: the first stage's wte and the last stage's copy must be
  // equal (compared by xxh64 over the pipeline group with the replica check).
  void check_tied_copies() const;
  // Tied embeddings over pipeline stages: the gradients of wte (first stage) and of its copy
  // (last stage) summed over the pipeline group, middle stages adding zeros (Megatron's
  // _allreduce_word_embedding_grads), behind the `embedding.grads_all_reduce` site.
  void all_reduce_tied_embedding_grads();
  float learning_rate(int64_t step) const;
  MicroBatch load(const SyntheticCorpus& corpus, const std::vector<int64_t>& idx, size_t from,
                  int count) const;
  Tensor staging(size_t count, DType dtype, const char* what) const;
  float global_loss(float local_mean) const;
  // This epoch's sample order after the `data.loader` site (skip, duplicate, reorder a sample).
  std::vector<int64_t> loader(std::vector<int64_t> idx) const;
  // The script-level calls, each behind its site: checkpoint.save, checkpoint.load, eval.loop.
  void save_call();
  void load_call();  // of cfg_.resume
  // load_checkpoint's restores: this rank's own shard as saved, or (a load that is not strict
  // and did not match every key) the tensors that match by name.
  void restore_shard(const std::string& dir, const nlohmann::json& entry);
  void restore_named(const std::string& dir, const nlohmann::json& m, const NamedLoad& named);
  // load_into "module" or "gathered" (checkpoint_module.cpp): the weights by name into the
  // module, the optimizer state by name into this rank's partition.
  void load_module(const std::string& dir, const nlohmann::json& m, const NamedLoad& named);
  // model_file.cpp: the model file beside a checkpoint, and a fresh run's load of one.
  void check_model_file_options() const;
  void save_model_file(const std::string& step_dir);
  void load_model_file();
  // engine.compile() under workload.zero.deepcompile (DeepCompile's set-up).
  void compile_engine();
  std::optional<float> eval_call();

  TrainConfig cfg_;
  parallel::Topology& topo_;
  MemoryAccountant& acct_;
  model::ParamLayout layout_;
  model::GptStage stage_;
  SyntheticCorpus corpus_, eval_corpus_;
  DistributedSampler sampler_;
  LossScaler scaler_;
  size_t total_ = 0;
  // Parameters, gradients and optimizer state, partitioned by ZeRO stage.
  std::optional<parallel::ZeroEngine> zero_;
  // The MoE blocks' experts: their own parameters and ZeRO engine over the expert-data-parallel
  // group (null without MoE).
  std::unique_ptr<parallel::ExpertParallel> experts_;
  std::optional<Muon> muon_;  // workload.optimizer muon (muon.hpp)
  Tensor replicated_;  // uint8, 1 where the gradient norm leaves the element out on this rank
  // No element is left out (tp 1, no tied copy on this rank): the norm's sum of squares sees every
  // gradient, so it is non-finite exactly when one of them is, and it is the overflow check.
  bool norm_sees_every_element_ = false;
  // workload.grad_norm dtensor_per_mesh under tp > 1: dense_mesh_masks (grad_norm.hpp).
  Tensor sharded_mask_, replicated_only_mask_;
  // Communication staging buffers (16-bit gradients, a ZeRO partition in flight) live on the
  // rank's device but outside its memory budget, as the host vectors they replace on CPU did.
  mutable MemoryAccountant staging_;
  // workload.freeze: this rank's frozen flat ranges (the engine zeroes their gradients; the
  // optimizer skips them).
  std::vector<std::pair<size_t, size_t>> frozen_;
  DType gemm_precision_ = DType::kF32;
  // deepspeed.initialize's optimizer wrapper (ds_optimizer_wrapper).
  OptimizerWrapper ds_wrapper_ = OptimizerWrapper::kNone;
  int64_t step_ = 0;
  // lr_scheduler.step calls missed (negative) or made twice (positive) on this rank: the
  // schedule is read at step_ + lr_offset_.
  int64_t lr_offset_ = 0;
  int epoch_ = 0;  // data position (steps mode): epoch and offset into this rank's indices
  size_t pos_ = 0;
  MetricsSink sink_;
  SectionSink section_sink_;
  StepMetrics* timing_ = nullptr;  // the step train_step is timing (forward_backward adds to it)
  // workload.ddp.wrapper: the layouts torch's DDP is modelled for (ConfigError otherwise).
  void check_ddp_wrapper(const parallel::Topology& topo) const;
  parallel::ZeroConfig zero_config(const parallel::Topology& topo) const;
  void phase(const char* name, std::chrono::steady_clock::time_point from);
  void section(const char* name, bool begin) const {
    if (section_sink_) section_sink_(name, begin);
  }
};

}  // namespace fl::train
