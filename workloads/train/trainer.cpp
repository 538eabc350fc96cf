#include "workloads/train/trainer.hpp"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "injector/site.hpp"
#include "kernels/ops.hpp"
#include "kernels/versions.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/model/state_dict.hpp"
#include "workloads/parallel/pipeline.hpp"
#include "workloads/train/freeze.hpp"
#include "workloads/train/grad_norm.hpp"
#include "workloads/train/job_checks.hpp"

namespace fl::train {

namespace {
using comm::device_buffer;
using comm::host_buffer;
}  // namespace

DType gemm_precision_for(DType precision, Device device, const std::string& setting) {
  if (setting != "auto" && setting != "fp32") {
    raise<ConfigError>("{}={} is not allowed (allowed: auto, fp32)", kGemmPrecision.env(), setting);
  }
  if (setting == "fp32" || !device.is_cuda() ||
      (precision != DType::kF16 && precision != DType::kBF16)) {
    return DType::kF32;
  }
  const int cc = cuda_compute_capability(device.index);
  if (precision == DType::kBF16 && cc > 0 && cc < 80) {
    raise<ConfigError>(
        "--precision bf16 on {} (compute capability {}.{}) needs bf16 tensor-core GEMMs, which "
        "need compute capability 8.0 or newer; use --precision fp16, or {}=fp32 for fp32 GEMMs",
        device.str(), cc / 10, cc % 10, kGemmPrecision.env());
  }
  return precision;
}

parallel::ZeroConfig Trainer::zero_config(const parallel::Topology& topo) const {
  return zero_config_of(cfg_, topo.layout.zero, topo.rank);
}

Trainer::Trainer(TrainConfig cfg, parallel::Topology& topo, MemoryAccountant& acct)
    : cfg_(std::move(cfg)),
      topo_(topo),
      acct_(acct),
      layout_(cfg_.model, topo.layout.tp, topo.tp_rank, topo.layout.pp, topo.pp_rank),
      stage_(cfg_.model, layout_, topo.layout.tp > 1 ? topo.tp.get() : nullptr, acct),
      corpus_(cfg_.data_vocab > 0 ? cfg_.data_vocab : cfg_.model.vocab, cfg_.model.seq_len,
              cfg_.num_samples, cfg_.data_seed),
      eval_corpus_(cfg_.data_vocab > 0 ? cfg_.data_vocab : cfg_.model.vocab, cfg_.model.seq_len,
                   cfg_.eval_samples > 0
                       ? cfg_.eval_samples
                       : std::max<int64_t>(
                             1, int64_t{cfg_.eval_batches} * cfg_.micro_batch * topo.layout.dp),
                   cfg_.data_seed + 1000003),
      sampler_(cfg_.num_samples, topo.layout.dp, topo.dp_rank, cfg_.shuffle, cfg_.drop_last,
               cfg_.data_seed),
      scaler_((validate_numerics(cfg_), cfg_.loss_scale)),
      staging_(0, topo.rank, acct.device()) {
  stage_.set_activation_precision(cfg_.precision);
  check_job_config(cfg_, topo.layout);
  ds_wrapper_ = ds_optimizer_wrapper(cfg_, topo.layout);
  gemm_precision_ = gemm_precision_for(cfg_.precision, acct.device(), kGemmPrecision.get());
  check_ddp_wrapper(topo);
  check_freeze(cfg_.freeze, cfg_.model);
  parallel::ZeroConfig z = zero_config(topo);
  z.frozen = frozen_ranges(layout_, freeze_patterns(cfg_.freeze, cfg_.model));
  frozen_ = z.frozen;
  if (!z.frozen.empty()) {
    size_t frozen = 0;
    for (const auto& [lo, hi] : z.frozen) frozen += hi - lo;
    // deepspeed.initialize(model_parameters=[p for p in model.parameters() if p.requires_grad])
    // builds the optimizer from this rank's trainable parameters (its pipeline stage's).
    if (frozen >= layout_.total()) {
      raise(
          "ValueError: optimizer got an empty parameter list (rank {}, pipeline stage {} of {}: "
          "workload.freeze leaves none of the {} parameters it holds trainable)",
          topo.rank, topo.pp_rank, topo.layout.pp, layout_.total());
    }
  }
  stage_.set_activation_checkpointing(cfg_.activation_checkpointing);
  zero_.emplace(z, layout_, topo, acct_, MemoryAccountant::host(), staging_);
  if (cfg_.model.moe.enabled()) {
    parallel::check_moe_training(!cfg_.save_dir.empty() || !cfg_.resume.empty() ||
                                 !cfg_.load_model_file.empty() || cfg_.model_file != "none");
    experts_ = std::make_unique<parallel::ExpertParallel>(cfg_.model, z, topo, acct_,
                                                          MemoryAccountant::host(), staging_);
    stage_.set_moe(&experts_->layer());
  }
  // DeepSpeed's MuonWithAuxAdam takes momentum 0.95 when its config names none.
  if (cfg_.optimizer == "muon")
    muon_.emplace(layout_, cfg_.momentum > 0 ? cfg_.momentum : 0.95f, acct_);
  compile_engine();
  total_ = zero_->total();
  // Elements the gradient norm leaves out on this rank: those replicated across TP ranks (counted
  // on TP rank 0 only), and a tied weight's copy on the last stage (counted on the first).
  std::vector<uint8_t> replicated(total_, 0);
  for (auto& s : layout_.specs()) {
    if (s.shared || (s.split == model::Split::kReplicated && topo.tp_rank != 0)) {
      std::fill_n(replicated.begin() + static_cast<long>(s.offset), s.numel(), 1);
    }
  }
  norm_sees_every_element_ =
      std::none_of(replicated.begin(), replicated.end(), [](uint8_t skip) { return skip != 0; });
  replicated_ = Tensor::zeros({static_cast<int64_t>(total_)}, DType::kU8, "trainer.replicated_mask",
                              staging_);
  ops::from_host(replicated_.raw(), replicated.data(), total_);
  if (cfg_.grad_norm == "dtensor_per_mesh" && topo.layout.tp > 1) {
    const MeshMasks masks = dense_mesh_masks(layout_, total_);
    sharded_mask_ = staging(total_, DType::kU8, "trainer.sharded_mask");
    replicated_only_mask_ = staging(total_, DType::kU8, "trainer.replicated_only_mask");
    ops::from_host(sharded_mask_.raw(), masks.sharded.data(), total_);
    ops::from_host(replicated_only_mask_.raw(), masks.replicated.data(), total_);
  }
}

// engine.compile() under workload.zero.deepcompile at stage 3: DeepCompile's init_z3 registers
// every module parameter (model.parameters() order, which zero.Init numbers as ds_id) with the
// gradient partition the ZeRO-3 optimizer keeps for it. The optimizer keeps partitions only for
// the trainable parameters it was given, and before DeepSpeed 0.19.6 (deepspeedai/DeepSpeed
// pull request 8214, merged 2026-08-12 after 0.19.5) the lookup did not skip frozen ones: the
// first frozen parameter is a KeyError on every rank, before any step.
void Trainer::compile_engine() {
  if (!cfg_.deepcompile || topo_.layout.zero != 3 || cfg_.freeze.empty()) return;
  if (!ops::stated_and_older(ops::job_versions().deepspeed, 0, 19, 6)) return;
  const auto first = first_frozen_parameter(cfg_.freeze, cfg_.model);
  if (!first) return;
  raise(
      "KeyError: {} (rank {}: engine.compile() under DeepSpeed {}, deepspeed/compile/init_z3.py "
      "looks up optimizer._DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition[p.ds_id] "
      "for every parameter; '{}' has requires_grad=False, and the ZeRO-3 optimizer holds no "
      "gradient partition for it)",
      first->first, topo_.rank, ops::job_versions().deepspeed, first->second);
}

Tensor Trainer::staging(size_t count, DType dtype, const char* what) const {
  return Tensor::zeros({static_cast<int64_t>(count)}, dtype, what, staging_);
}

float Trainer::learning_rate(int64_t step) const {
  return scheduled_lr(cfg_, topo_.layout.dp, step);
}

Trainer::MicroBatch Trainer::load(const SyntheticCorpus& corpus, const std::vector<int64_t>& idx,
                                  size_t from, int count) const {
  MicroBatch mb;
  const int T = cfg_.model.seq_len;
  mb.B = count;
  mb.tokens.resize(static_cast<size_t>(count) * T);
  mb.targets.resize(static_cast<size_t>(count) * T);
  for (int i = 0; i < count; ++i) {
    const int64_t sample = idx[from + static_cast<size_t>(i)];
    FAULTLINE_FAULT_POINT("data.fetch", (fault::SiteContext{sample, "", "data.fetch", -1, nullptr,
                                                            0, DType::kI32, -1}));
    corpus.sample(sample, mb.tokens.data() + static_cast<size_t>(i) * T,
                  mb.targets.data() + static_cast<size_t>(i) * T);
  }
  return mb;
}

float Trainer::global_loss(float local_mean) const {
  float contrib = (topo_.last_stage() && topo_.tp_rank == 0) ? local_mean : 0.0f;
  topo_.world->all_reduce(host_buffer(&contrib, 1, DType::kF32));
  return contrib / static_cast<float>(topo_.layout.dp);
}

float Trainer::forward_backward(const std::vector<MicroBatch>& mbs, bool backward) {
  ops::GemmPrecisionGuard gemms(gemm_precision_);
  const int T = cfg_.model.seq_len;
  const int M = static_cast<int>(mbs.size());
  const float scale = cfg_.precision == DType::kF16 ? scaler_.scale() : 1.0f;
  const float dloss = scale / static_cast<float>(M);
  double loss_sum = 0;
  if (topo_.layout.pp == 1 && cfg_.pair_loss) {
    loss_sum = pair_forward_backward(mbs, backward, dloss);
  } else if (topo_.layout.pp == 1) {
    for (size_t i = 0; i < mbs.size(); ++i) {
      const auto& mb = mbs[i];
      // The script's `loss = model(batch)`: skipped (no loss, no gradients, none of the
      // forward's collectives) or made twice, the first call's activations still held.
      const auto v = FAULTLINE_FAULT_POINT(
          "model.forward", (fault::SiteContext{-1, "", "model.forward", -1, nullptr, 0, DType::kF32,
                                               static_cast<int64_t>(i)}));
      if (v == fault::Verdict::kSkip) continue;
      std::unique_ptr<model::StageActs> first;
      if (v == fault::Verdict::kRepeat) {
        first = stage_.forward(*zero_, mb.tokens.data(), nullptr, mb.targets.data(), mb.B, T);
      }
      const auto f0 = std::chrono::steady_clock::now();
      auto a = stage_.forward(*zero_, mb.tokens.data(), nullptr, mb.targets.data(), mb.B, T);
      loss_sum += a->loss;
      phase("forward", f0);
      if (!backward) continue;
      const auto b0 = std::chrono::steady_clock::now();
      zero_->begin_backward();
      stage_.backward(*a, *zero_, dloss, nullptr, nullptr);
      zero_->end_backward();
      phase("backward", b0);
      // A no_sync guard that does nothing: this micro-batch's gradients are all-reduced now
      // (the accumulated sum stays right up to rounding: what earlier rounds averaged is the
      // same on every replica); the step's last round is finish_gradients', after the loop. A
      // rank that skipped a micro-batch, or has fewer, makes fewer rounds than its replicas and
      // the job hangs in the all-reduce, as torch's DDP without no_sync does.
      if (cfg_.grad_sync == "micro_batch" && i + 1 < mbs.size()) {
        zero_->all_reduce_gradients();
        if (experts_) experts_->all_reduce_gradients();
      }
    }
  } else {
    std::vector<parallel::PipelineMicroBatch> pmbs;
    for (const auto& mb : mbs) pmbs.push_back({mb.tokens.data(), mb.targets.data(), mb.B});
    const auto p0 = std::chrono::steady_clock::now();
    // DeepSpeed's pipeline engine calls the optimizer's clear_lp_grads before each backward on a
    // stage that is not the last (which releases and wrappers fail it: pipeline_clear_lp_grads).
    const std::string ds = ops::job_versions().deepspeed;
    const std::function<void()> clear_lp_grads = [this, &ds] {
      pipeline_clear_lp_grads(ds_wrapper_, topo_.layout.zero, cfg_.precision, ds, topo_.rank);
    };
    loss_sum = parallel::run_pipeline(stage_, *zero_, topo_, pmbs, T, dloss, backward,
                                      cfg_.schedule, acct_, clear_lp_grads);
    if (backward) {
      pipeline_reduce_grads(ds_wrapper_, cfg_.precision, topo_.layout.zero, ds, topo_.rank);
    }
    phase("pipeline forward/backward", p0);
    if (!topo_.last_stage()) return 0.0f;
  }
  return static_cast<float>(loss_sum / M);
}

void Trainer::check_ddp_wrapper(const parallel::Topology& topo) const {
  check_ddp(cfg_, topo.layout);
}

void Trainer::phase(const char* name, std::chrono::steady_clock::time_point from) {
  if (timing_ == nullptr || timing_->phases.size() >= StepMetrics::kMaxPhases) return;
  const auto now = std::chrono::steady_clock::now();
  timing_->phases.push_back({name, std::chrono::duration<double>(from - timing_->started).count(),
                             std::chrono::duration<double>(now - from).count()});
}

StepMetrics Trainer::train_step(const std::vector<MicroBatch>& mbs) {
  StepMetrics m;
  const auto t0 = m.started = std::chrono::steady_clock::now();
  timing_ = &m;
  struct StopTiming {  // also when the step throws: nothing points at `m` after it
    Trainer* t;
    ~StopTiming() { t->timing_ = nullptr; }
  } stop_timing{this};
  fault::set_step(step_);
  ops::begin_step(step_);
  acct_.reset_peak();
  const int dp = topo_.layout.dp;
  zero_->begin_step();
  if (experts_) experts_->begin_step();

  const float local_loss = forward_backward(mbs, true);
  const auto g0 = std::chrono::steady_clock::now();
  zero_->finish_gradients();
  if (experts_) experts_->finish_gradients();
  all_reduce_tied_embedding_grads();
  zero_->drop_gathered();

  // The gradients this rank is responsible for: all of them, or its ZeRO partition, judged one
  // fp32 chunk at a time (one chunk in fp32).
  m.step = step_;
  const float scale = cfg_.precision == DType::kF16 ? scaler_.scale() : 1.0f;
  m.loss_scale = scale;
  auto judged = judge_gradients(scale);
  int32_t overflow = judged.overflow;
  // Under torch's DDP (a replicated model: tp 1, pp 1, every expert on every rank) each replica
  // judges the averaged gradients it holds, with no collective between the backward and the
  // next forward, as torch's clipping and GradScaler do there: a rank whose reduction did not
  // finish reaches its next step (and fails there) while its replicas wait in their all-reduce.
  const bool replicas_judge = cfg_.ddp_wrapper;
  if (!replicas_judge) {
    topo_.world->all_reduce(host_buffer(&overflow, 1, DType::kI32), comm::ReduceOp::kMax);
  }
  if (cfg_.precision == DType::kF16) {
    m.skipped = !scaler_.update(overflow != 0, step_);
  }
  // Global gradient norm (unscaled). Elements replicated across TP ranks count once; below
  // ZeRO-2 (fp32; below ZeRO-1 in fp16/bf16) every data-parallel replica judges the same averaged
  // gradients, so they count once too.
  const double sq = replicas_judge ? judged.dense_sq + judged.expert_sq : global_sq_norm(judged);
  m.grad_norm =
      overflow ? std::numeric_limits<float>::infinity() : static_cast<float>(std::sqrt(sq));
  m.lr = learning_rate(std::max<int64_t>(0, step_ + lr_offset_));
  phase("gradients", g0);
  const auto o0 = std::chrono::steady_clock::now();
  if (!m.skipped) {
    apply_update(m, scale);
    zero_->finish_update();
    if (experts_) experts_->finish_update();
  }
  zero_->end_step();
  if (experts_) experts_->end_step();
  // The script's `scheduler.step()`: a rank that skips it (or calls it twice) reads the
  // schedule at another position from now on, and its updates differ from its replicas'.
  const auto lr_call = FAULTLINE_FAULT_POINT(
      "lr_scheduler.step",
      (fault::SiteContext{step_, "", "lr_scheduler.step", -1, nullptr, 0, DType::kF32, -1}));
  if (lr_call == fault::Verdict::kSkip) --lr_offset_;
  if (lr_call == fault::Verdict::kRepeat) ++lr_offset_;
  phase("optimizer", o0);
  m.skipped_total = cfg_.precision == DType::kF16 ? scaler_.skipped_steps() : 0;
  m.loss = global_loss(local_loss);
  ++step_;
  m.ended = std::chrono::steady_clock::now();
  m.step_time_s = std::chrono::duration<double>(m.ended - t0).count();
  int64_t samples = 0;
  for (const auto& mb : mbs) samples += mb.B;
  m.tokens_per_s = static_cast<double>(samples) * cfg_.model.seq_len * dp / m.step_time_s;
  m.mem_current = acct_.current();
  m.mem_peak = acct_.peak();
  return m;
}

void Trainer::apply_update(const StepMetrics& m, float scale) {
  const float clip = (cfg_.grad_clip > 0 && m.grad_norm > cfg_.grad_clip)
                         ? cfg_.grad_clip / (m.grad_norm + 1e-6f)
                         : 1.0f;
  ops::AdamW hp{m.lr, cfg_.beta1, cfg_.beta2, 1e-8f, cfg_.weight_decay};
  ops::Sgd sgd{m.lr, cfg_.momentum, cfg_.weight_decay};
  auto apply = [&](const parallel::ZeroEngine::Update& u) {
    // Frozen elements are not in the optimizer: only the trainable runs of the chunk are updated.
    const auto runs = frozen_.empty() ? std::vector<std::pair<size_t, size_t>>{{0, u.n}}
                                      : trainable_runs(frozen_, u.first, u.n);
    for (const auto& [a, b] : runs) {
      auto adamw = [&](size_t lo, size_t hi) {
        ops::adamw_update(u.params + lo, u.grads + lo, u.m ? u.m + lo : nullptr,
                          u.v ? u.v + lo : nullptr, hi - lo, step_ + 1, hp);
      };
      if (muon_) {
        muon_->step(u, a, b, hp.lr, cfg_.weight_decay, adamw);
      } else if (cfg_.optimizer == "sgd") {
        ops::sgd_update(u.params + a, u.grads + a, u.m ? u.m + a : nullptr, b - a, sgd);
      } else {
        adamw(a, b);
      }
    }
  };
  for (size_t c = 0; c < zero_->owned_chunks(); ++c) {
    const parallel::FlatSpan owned = zero_->owned_grads(c);
    const size_t n = owned.hi - owned.lo;
    if (clip / scale != 1.0f) ops::scale(owned.data, n, clip / scale);  // x * 1 is x: no pass
    if (c == 0) {
      // Once per step; under fp16/bf16 with more than one chunk its data is the first chunk.
      std::optional<ops::HostStage> staged;  // a plan that corrupts the gradients acts on host data
      auto verdict = FAULTLINE_FAULT_POINT(
          "optimizer.step",
          (fault::SiteContext{step_, "", "optimizer.step", -1, staged.emplace(owned.data, n).host(),
                              n, DType::kF32, -1}));
      staged.reset();
      if (verdict == fault::Verdict::kSkip) return;
    }
    // This rank's elements of the chunk: all of them (ZeRO-0) or its partition, on the host
    // under offload.
    const auto u = zero_->begin_update(c);
    DeviceGuard on(u.device);
    apply(u);
  }
  // The experts' own engine, after the dense update, with the same clip and loss scale.
  if (experts_) experts_->update(clip / scale, apply);
}

// What run() keeps across steps: the metrics so far and where the current step's interval (wall
// time, time in communication) began.
struct Trainer::RunLog {
  std::vector<StepMetrics> history;
  std::chrono::steady_clock::time_point mark = std::chrono::steady_clock::now();
  int64_t comm_mark = comm::time_in_comm_ns();
  int64_t ops_mark = comm::comm_ops_ended();
};

void Trainer::finish_step(StepMetrics m, int epoch, RunLog& log) {
  m.epoch = epoch;
  if (cfg_.eval_every > 0 && step_ % cfg_.eval_every == 0) {
    section("eval", true);
    m.eval_loss = eval_call();
    section("eval", false);
  }
  if (cfg_.check_replicas_every > 0 && step_ % cfg_.check_replicas_every == 0) {
    check_replicas();
  }
  const auto now = std::chrono::steady_clock::now();
  m.reported_after_s = std::chrono::duration<double>(now - m.ended).count();
  const int64_t comm_now = comm::time_in_comm_ns();
  m.interval_s = std::chrono::duration<double>(now - log.mark).count();
  m.comm_s = static_cast<double>(comm_now - log.comm_mark) * 1e-9;
  m.comm_op_s = comm::comm_op_seconds_since(log.ops_mark);
  log.mark = now;
  log.comm_mark = comm_now;
  // The next step's ops start after this list's (an op ending in between is not lost).
  log.ops_mark = m.comm_op_s ? log.ops_mark + static_cast<int64_t>(m.comm_op_s->size())
                             : comm::comm_ops_ended();
  if (sink_) sink_(m);
  log.history.push_back(m);
}

void Trainer::run_epochs(RunLog& log) {
  const size_t mb = static_cast<size_t>(cfg_.micro_batch);
  // Whole epochs of this rank's shard: a rank with fewer samples runs fewer steps.
  for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
    fault::set_step(step_);
    auto idx = loader(sampler_.indices(epoch));
    size_t usable = cfg_.drop_last ? idx.size() / mb * mb : idx.size();
    size_t pos = 0;
    while (pos < usable) {
      std::vector<MicroBatch> mbs;
      for (int k = 0; k < cfg_.grad_accum && pos < usable; ++k) {
        const int count = static_cast<int>(std::min(mb, usable - pos));
        mbs.push_back(load(corpus_, idx, pos, count));
        pos += static_cast<size_t>(count);
      }
      finish_step(train_step(mbs), epoch, log);
    }
  }
}

std::vector<Trainer::MicroBatch> Trainer::next_batches(std::vector<int64_t>& idx) {
  const size_t mb = static_cast<size_t>(cfg_.micro_batch);
  std::vector<MicroBatch> mbs;
  for (int k = 0; k < cfg_.grad_accum; ++k) {
    if (pos_ + mb > idx.size()) {
      fault::set_step(step_);
      idx = loader(sampler_.indices(++epoch_));
      pos_ = 0;
      if (idx.size() < mb) {
        raise("rank {} has {} samples per epoch, fewer than one micro-batch of {}", topo_.rank,
              idx.size(), mb);
      }
    }
    mbs.push_back(load(corpus_, idx, pos_, cfg_.micro_batch));
    pos_ += mb;
  }
  return mbs;
}

void Trainer::run_steps(RunLog& log) {
  check_model_file_options();
  if (!cfg_.resume.empty()) {
    section("checkpoint", true);
    load_call();
    section("checkpoint", false);
  }
  if (!cfg_.load_model_file.empty()) load_model_file();
  if (cfg_.reset_loss_scale) {
    scaler_ = LossScaler(cfg_.loss_scale);
    if (topo_.rank == 0) std::printf("# loss scale reset to %g\n", scaler_.scale());
  }
  fault::set_step(step_);
  auto idx = loader(sampler_.indices(epoch_));
  while (step_ < cfg_.steps) {
    std::vector<MicroBatch> mbs = next_batches(idx);
    if (cfg_.skip_steps.count(step_)) {
      // The batches are consumed (the data position moves on) but nothing is trained on them.
      if (topo_.rank == 0) {
        std::printf("# step %lld: skipping its batches\n", static_cast<long long>(step_));
      }
      ++step_;
    } else {
      finish_step(train_step(mbs), epoch_, log);
    }
    if (!cfg_.save_dir.empty() &&
        ((cfg_.save_every > 0 && step_ % cfg_.save_every == 0) || step_ == cfg_.steps)) {
      section("checkpoint", true);
      save_call();
      section("checkpoint", false);
    }
  }
}

std::vector<StepMetrics> Trainer::run() {
  RunLog log;
  if (cfg_.epochs > 0) {
    run_epochs(log);
  } else {
    run_steps(log);
  }
  return std::move(log.history);
}

void Trainer::all_reduce_tied_embedding_grads() {
  if (!cfg_.model.structure.tie_embeddings || topo_.layout.pp == 1) return;
  // The script's finalize-grads call: skipped, the two copies of the tied weight drift apart.
  const auto v = FAULTLINE_FAULT_POINT(
      "embedding.grads_all_reduce", (fault::SiteContext{step_, "pp", "embedding.grads_all_reduce",
                                                        -1, nullptr, 0, DType::kF32, -1}));
  if (v == fault::Verdict::kSkip) return;
  const size_t n = static_cast<size_t>(layout_.local_vocab() * cfg_.model.d_model);
  const char* name = topo_.first_stage() ? "wte" : topo_.last_stage() ? "lm_head.weight" : nullptr;
  zero_->sum_grads_over(*topo_.pp, name ? layout_.spec(name).offset : zero_->kNoElements, n);
}

void Trainer::check_replicas() const {
  check_tied_copies();
  const int dp = topo_.layout.dp;
  if (dp < 2) return;
  // ZeRO-3 replicas hold different partitions by design: compare the gathered model instead.
  const std::vector<float> p = full_parameters();
  int64_t mine = static_cast<int64_t>(XXH64(p.data(), total_ * sizeof(float), 0));
  std::vector<int64_t> all(static_cast<size_t>(dp));
  topo_.dp->all_gather(host_buffer(&mine, 1, DType::kI64),
                       host_buffer(all.data(), all.size(), DType::kI64));
  for (int r = 1; r < dp; ++r) {
    if (all[static_cast<size_t>(r)] != all[0]) {
      raise(
          "[rank {}] parameters differ across data-parallel replicas at step {}: dp rank 0 has "
          "xxh64 {:016x}, dp rank {} has {:016x} (replicas must hold identical weights)",
          topo_.rank, step_, static_cast<uint64_t>(all[0]), r,
          static_cast<uint64_t>(all[static_cast<size_t>(r)]));
    }
  }
}

void Trainer::check_tied_copies() const {
  if (!cfg_.model.structure.tie_embeddings || topo_.layout.pp == 1) return;
  // Stages 0-1 only (tied embeddings over stages): every rank holds its whole shard.
  const std::vector<float> p = full_parameters();
  const char* name = topo_.first_stage() ? "wte" : topo_.last_stage() ? "lm_head.weight" : nullptr;
  int64_t mine = 0;
  if (name) {
    const model::ParamSpec& s = layout_.spec(name);
    mine = static_cast<int64_t>(XXH64(p.data() + s.offset, s.numel() * sizeof(float), 0));
  }
  std::vector<int64_t> all(static_cast<size_t>(topo_.layout.pp));
  topo_.pp->all_gather(host_buffer(&mine, 1, DType::kI64),
                       host_buffer(all.data(), all.size(), DType::kI64));
  if (all.front() != all.back()) {
    raise(
        "[rank {}] the tied word embeddings differ across pipeline stages at step {}: stage 0's "
        "wte has xxh64 {:016x}, stage {}'s copy for the LM head has {:016x} (the embedding "
        "group's all-reduce of their gradients keeps them equal)",
        topo_.rank, step_, static_cast<uint64_t>(all.front()), topo_.layout.pp - 1,
        static_cast<uint64_t>(all.back()));
  }
}

std::vector<float> Trainer::full_parameters() const {
  return zero_->full_parameters();
}

}  // namespace fl::train
