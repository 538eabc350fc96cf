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
#include "workloads/comm/communicator.hpp"

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

Trainer::Trainer(TrainConfig cfg, parallel::Topology& topo, MemoryAccountant& acct)
    : cfg_(std::move(cfg)),
      topo_(topo),
      acct_(acct),
      layout_(cfg_.model, topo.layout.tp, topo.tp_rank, topo.layout.pp, topo.pp_rank),
      stage_(cfg_.model, layout_, topo.layout.tp > 1 ? topo.tp.get() : nullptr, acct),
      corpus_(cfg_.data_vocab > 0 ? cfg_.data_vocab : cfg_.model.vocab, cfg_.model.seq_len,
              cfg_.num_samples, cfg_.data_seed),
      eval_corpus_(
          cfg_.data_vocab > 0 ? cfg_.data_vocab : cfg_.model.vocab, cfg_.model.seq_len,
          std::max<int64_t>(1, int64_t{cfg_.eval_batches} * cfg_.micro_batch * topo.layout.dp),
          cfg_.data_seed + 1000003),
      sampler_(cfg_.num_samples, topo.layout.dp, topo.dp_rank, cfg_.shuffle, cfg_.drop_last,
               cfg_.data_seed),
      scaler_((validate_numerics(cfg_), cfg_.loss_scale)),
      staging_(0, topo.rank, acct.device()) {
  stage_.set_activation_precision(cfg_.precision);
  if (cfg_.precision != DType::kF32 && cfg_.precision != DType::kF16 &&
      cfg_.precision != DType::kBF16) {
    raise<ConfigError>("precision {} is not supported for training (allowed: fp32, fp16, bf16)",
                       dtype_name(cfg_.precision));
  }
  gemm_precision_ = gemm_precision_for(cfg_.precision, acct.device(), kGemmPrecision.get());
  if (cfg_.schedule != "1f1b" && cfg_.schedule != "gpipe") {
    raise<ConfigError>("pipeline schedule '{}' is not supported (allowed: 1f1b, gpipe)",
                       cfg_.schedule);
  }
  if (cfg_.micro_batch < 1 || cfg_.grad_accum < 1) {
    raise<ConfigError>("micro_batch {} and grad_accum {} must be at least 1", cfg_.micro_batch,
                       cfg_.grad_accum);
  }
  const int dp = topo.layout.dp, zero = topo.layout.zero;
  total_ = layout_.total();
  part_ = (total_ + static_cast<size_t>(dp) - 1) / static_cast<size_t>(dp);
  padded_ = part_ * static_cast<size_t>(dp);
  lo_ = std::min(total_, part_ * static_cast<size_t>(topo.dp_rank));
  hi_ = std::min(total_, lo_ + part_);

  const uint64_t seed = cfg_.model.seed + (cfg_.seed_per_rank ? topo.rank : 0);
  if (zero == 3) {
    master_ = Tensor::zeros({static_cast<int64_t>(part_)}, DType::kF32, "params.master", acct_);
    if (cfg_.zero_init) {
      fill_from_host(master_, [&](float* p) { layout_.initialize_range(p, lo_, hi_, seed); });
    } else {
      // The whole model exists on every rank before it is partitioned.
      Tensor full = Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32,
                                  "params.init.full_model", acct_);
      fill_from_host(full, [&](float* p) { layout_.initialize(p, seed); });
      ops::copy(master_.f32(), full.f32() + lo_, hi_ - lo_);
    }
  } else {
    master_ = Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32, "params.master", acct_);
    fill_from_host(master_, [&](float* p) { layout_.initialize(p, seed); });
    if (cfg_.precision != DType::kF32) {
      compute_ =
          Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32, "params.compute", acct_);
      refresh_compute_copy();
    }
  }
  if (cfg_.broadcast_init && zero < 3 && dp > 1) {
    topo.dp->broadcast(device_buffer(master_.f32(), padded_, DType::kF32), 0);
    refresh_compute_copy();
  }
  grads_ = Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32, "grads", acct_);
  const int64_t state = zero == 0 ? static_cast<int64_t>(padded_) : static_cast<int64_t>(part_);
  const int k = optimizer_state_bytes(cfg_);  // 8: two fp32 tensors, 4: one, 0: none
  m_ = Tensor::zeros({k >= 4 ? state : 0}, DType::kF32,
                     cfg_.optimizer == "sgd" ? "optimizer.momentum_buffer" : "optimizer.exp_avg",
                     acct_);
  v_ = Tensor::zeros({k >= 8 ? state : 0}, DType::kF32, "optimizer.exp_avg_sq", acct_);
  std::vector<uint8_t> replicated(total_, 0);
  for (auto& s : layout_.specs()) {
    if (s.split == model::Split::kReplicated) {
      std::fill_n(replicated.begin() + static_cast<long>(s.offset), s.numel(), 1);
    }
  }
  replicated_ = Tensor::zeros({static_cast<int64_t>(total_)}, DType::kU8, "trainer.replicated_mask",
                              staging_);
  ops::from_host(replicated_.raw(), replicated.data(), total_);
}

void Trainer::fill_from_host(Tensor& t, const std::function<void(float*)>& fill) {
  if (t.device().is_cuda()) {
    std::vector<float> host(t.numel());
    fill(host.data());
    ops::from_host(t.f32(), host.data(), host.size() * sizeof(float));
  } else {
    fill(t.f32());
  }
}

Tensor Trainer::staging(size_t count, DType dtype, const char* what) const {
  return Tensor::zeros({static_cast<int64_t>(count)}, dtype, what, staging_);
}

void Trainer::refresh_compute_copy() {
  if (!compute_.defined()) return;
  ops::copy(compute_.f32(), master_.f32(), padded_);
  ops::round_to_precision(compute_.f32(), padded_, cfg_.precision);
}

float* Trainer::compute_params() {
  return compute_.defined() ? compute_.f32() : master_.f32();
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
  const int T = cfg_.model.seq_len, C = cfg_.model.d_model;
  const int M = static_cast<int>(mbs.size());
  float* params = compute_params();
  Tensor gathered;
  if (topo_.layout.zero == 3) {
    // Parameters are gathered for the step and freed right after its backward.
    gathered =
        Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32, "params.gathered", acct_);
    topo_.dp->all_gather(device_buffer(master_.f32(), part_, DType::kF32),
                         device_buffer(gathered.f32(), padded_, DType::kF32));
    ops::round_to_precision(gathered.f32(), padded_, cfg_.precision);
    params = gathered.f32();
  }
  const float scale = cfg_.precision == DType::kF16 ? scaler_.scale() : 1.0f;
  const float dloss = scale / static_cast<float>(M);
  float* grads = grads_.f32();
  double loss_sum = 0;

  if (topo_.layout.pp == 1) {
    for (const auto& mb : mbs) {
      auto a = stage_.forward(params, mb.tokens.data(), nullptr, mb.targets.data(), mb.B, T);
      loss_sum += a->loss;
      if (backward) stage_.backward(*a, params, grads, dloss, nullptr, nullptr);
    }
    return static_cast<float>(loss_sum / M);
  }

  // Pipeline: activations travel forward to pp_rank+1, gradients backward to pp_rank-1.
  comm::Communicator& pp = *topo_.pp;
  const bool first = topo_.first_stage(), last = topo_.last_stage();
  const int prev = topo_.pp_rank - 1, next = topo_.pp_rank + 1;
  std::vector<std::unique_ptr<model::StageActs>> acts(static_cast<size_t>(M));
  std::vector<Tensor> xin(static_cast<size_t>(M));
  auto act_count = [&](int k) {
    return static_cast<size_t>(mbs[static_cast<size_t>(k)].B) * T * C;
  };
  auto act_buf = [&](int k, const char* what) {
    return Tensor::zeros({static_cast<int64_t>(act_count(k))}, DType::kF32, what, acct_);
  };
  auto recv_forward = [&](int k) {
    if (first) return;
    xin[static_cast<size_t>(k)] = act_buf(k, "act.pipeline.recv");
    pp.recv(device_buffer(xin[static_cast<size_t>(k)].f32(), act_count(k), DType::kF32), prev);
  };
  auto fwd = [&](int k) {
    const auto& mb = mbs[static_cast<size_t>(k)];
    acts[static_cast<size_t>(k)] = stage_.forward(
        params, first ? mb.tokens.data() : nullptr,
        first ? nullptr : xin[static_cast<size_t>(k)].f32(), mb.targets.data(), mb.B, T);
    if (last) loss_sum += acts[static_cast<size_t>(k)]->loss;
  };
  auto out_buf = [&](int k) {
    return device_buffer(const_cast<float*>(acts[static_cast<size_t>(k)]->output()), act_count(k),
                         DType::kF32);
  };
  // Backward of micro-batch k given dy (null on the last stage); returns dx (empty on the first).
  auto bwd = [&](int k, const float* dy) {
    Tensor dx;
    if (!first) dx = act_buf(k, "grad.act.pipeline.send");
    stage_.backward(*acts[static_cast<size_t>(k)], params, grads, dloss, dy,
                    first ? nullptr : dx.f32());
    acts[static_cast<size_t>(k)].reset();
    xin[static_cast<size_t>(k)].release();
    return dx;
  };

  // Receive dy from the next stage, run the backward, send dx to the previous stage.
  auto recv_backward_send = [&](int k) {
    Tensor dy;
    if (!last) {
      dy = act_buf(k, "grad.act.pipeline.recv");
      pp.recv(device_buffer(dy.f32(), act_count(k), DType::kF32), next);
    }
    Tensor dx = bwd(k, last ? nullptr : dy.f32());
    if (!first) pp.send(device_buffer(dx.f32(), act_count(k), DType::kF32), prev);
  };

  if (!backward || cfg_.schedule == "gpipe") {
    for (int k = 0; k < M; ++k) {
      recv_forward(k);
      fwd(k);
      if (!last) pp.send(out_buf(k), next);
    }
    if (backward) {
      for (int k = 0; k < M; ++k) recv_backward_send(k);
    }
  } else {  // 1F1B: warm-up forwards, then one forward / one backward, then cool-down backwards
    const int warmup = std::min(topo_.layout.pp - topo_.pp_rank - 1, M);
    const int steady = M - warmup;
    for (int k = 0; k < warmup; ++k) {
      recv_forward(k);
      fwd(k);
      if (!last) pp.send(out_buf(k), next);
    }
    if (steady > 0) recv_forward(warmup);
    for (int i = 0; i < steady; ++i) {
      const int f = warmup + i;
      fwd(f);
      Tensor dy;
      if (!last) {
        dy = act_buf(i, "grad.act.pipeline.recv");
        pp.send_recv(out_buf(f), next, device_buffer(dy.f32(), act_count(i), DType::kF32), next);
      }
      Tensor dx = bwd(i, last ? nullptr : dy.f32());
      if (!first) {
        auto dxb = device_buffer(dx.f32(), act_count(i), DType::kF32);
        if (i == steady - 1) {
          pp.send(dxb, prev);
        } else {
          xin[static_cast<size_t>(f + 1)] = act_buf(f + 1, "act.pipeline.recv");
          pp.send_recv(
              dxb, prev,
              device_buffer(xin[static_cast<size_t>(f + 1)].f32(), act_count(f + 1), DType::kF32),
              prev);
        }
      }
    }
    for (int k = steady; k < M; ++k) recv_backward_send(k);
  }
  return last ? static_cast<float>(loss_sum / M) : 0.0f;
}

void Trainer::sync_gradients() {
  const int dp = topo_.layout.dp;
  if (dp == 1) return;
  comm::Communicator& g = *topo_.dp;
  float* grads = grads_.f32();
  const bool half = cfg_.precision != DType::kF32;
  if (topo_.layout.zero <= 1) {
    // Bucketed all-reduce (average) over the data-parallel group, in the training precision.
    const size_t bucket = std::max<size_t>(1, cfg_.bucket_bytes / sizeof(float));
    Tensor tmp16;
    if (half) tmp16 = staging(std::min(bucket, padded_), cfg_.precision, "grads.bucket16");
    for (size_t off = 0; off < padded_; off += bucket) {
      const size_t n = std::min(bucket, padded_ - off);
      if (!half) {
        g.all_reduce(device_buffer(grads + off, n, DType::kF32), comm::ReduceOp::kAvg);
      } else {
        ops::encode(grads + off, tmp16.raw(), cfg_.precision, n);
        g.all_reduce(device_buffer(tmp16.raw(), n, cfg_.precision), comm::ReduceOp::kAvg);
        ops::decode(tmp16.raw(), cfg_.precision, grads + off, n);
      }
    }
    return;
  }
  // ZeRO-2/3: each rank keeps the average of its own partition only.
  Tensor mine = staging(part_, DType::kF32, "grads.partition");
  if (!half) {
    g.reduce_scatter(device_buffer(grads, padded_, DType::kF32),
                     device_buffer(mine.f32(), part_, DType::kF32), comm::ReduceOp::kAvg);
  } else {
    Tensor in = staging(padded_, cfg_.precision, "grads.all16");
    Tensor out = staging(part_, cfg_.precision, "grads.partition16");
    ops::encode(grads, in.raw(), cfg_.precision, padded_);
    g.reduce_scatter(device_buffer(in.raw(), padded_, cfg_.precision),
                     device_buffer(out.raw(), part_, cfg_.precision), comm::ReduceOp::kAvg);
    ops::decode(out.raw(), cfg_.precision, mine.f32(), part_);
  }
  ops::copy(grads + part_ * static_cast<size_t>(topo_.dp_rank), mine.f32(), part_);
}

StepMetrics Trainer::train_step(const std::vector<MicroBatch>& mbs) {
  const auto t0 = std::chrono::steady_clock::now();
  fault::set_step(step_);
  acct_.reset_peak();
  const int zero = topo_.layout.zero, dp = topo_.layout.dp;
  ops::zero(grads_.f32(), padded_ * sizeof(float));

  const float local_loss = forward_backward(mbs, true);
  sync_gradients();

  // The gradients this rank is responsible for: all of them, or its ZeRO partition.
  const size_t rlo = zero >= 2 ? lo_ : 0, rhi = zero >= 2 ? hi_ : total_;
  float* g = grads_.f32();
  int32_t overflow = ops::has_non_finite(g + rlo, rhi - rlo) ? 1 : 0;
  topo_.world->all_reduce(host_buffer(&overflow, 1, DType::kI32), comm::ReduceOp::kMax);

  StepMetrics m;
  m.step = step_;
  const float scale = cfg_.precision == DType::kF16 ? scaler_.scale() : 1.0f;
  m.loss_scale = scale;
  if (cfg_.precision == DType::kF16) {
    m.skipped = !scaler_.update(overflow != 0, step_);
  }
  // Global gradient norm (unscaled). Elements replicated across TP ranks count once; below
  // ZeRO-2 every data-parallel replica holds the same averaged gradients, so they count once too.
  const uint8_t* skip = topo_.tp_rank != 0 ? replicated_.data<uint8_t>() + rlo : nullptr;
  double sq = ops::masked_sum_of_squares(g + rlo, skip, rhi - rlo, scale);
  topo_.world->all_reduce(host_buffer(&sq, 1, DType::kF64));
  if (zero < 2) sq /= dp;
  m.grad_norm =
      overflow ? std::numeric_limits<float>::infinity() : static_cast<float>(std::sqrt(sq));
  m.lr = learning_rate(step_);

  if (!m.skipped) {
    const float clip = (cfg_.grad_clip > 0 && m.grad_norm > cfg_.grad_clip)
                           ? cfg_.grad_clip / (m.grad_norm + 1e-6f)
                           : 1.0f;
    ops::scale(g + rlo, rhi - rlo, clip / scale);
    ops::AdamW hp{m.lr, cfg_.beta1, cfg_.beta2, 1e-8f, cfg_.weight_decay};
    ops::Sgd sgd{m.lr, cfg_.momentum, cfg_.weight_decay};
    // One optimizer step over n parameters; the state (if any) is this rank's m_/v_.
    auto update = [&](float* p, const float* grad, size_t n) {
      if (cfg_.optimizer == "sgd") {
        ops::sgd_update(p, grad, m_.f32(), n, sgd);
      } else {
        ops::adamw_update(p, grad, m_.f32(), v_.f32(), n, step_ + 1, hp);
      }
    };
    std::optional<ops::HostStage> staged;  // a plan that corrupts the gradients acts on host data
    auto verdict = FAULTLINE_FAULT_POINT(
        "optimizer.step", (fault::SiteContext{step_, "", "optimizer.step", -1,
                                              staged.emplace(g + rlo, rhi - rlo).host(), rhi - rlo,
                                              DType::kF32, -1}));
    staged.reset();
    if (verdict != fault::Verdict::kSkip) {
      if (zero == 0) {
        update(master_.f32(), g, total_);
      } else if (zero == 3) {
        update(master_.f32(), g + lo_, hi_ - lo_);
      } else {
        update(master_.f32() + lo_, g + lo_, hi_ - lo_);
      }
    }
    if (zero == 1 || zero == 2) {
      // Each rank updated its partition: gather the whole parameter vector back.
      Tensor mine = staging(part_, DType::kF32, "params.partition");
      ops::copy(mine.f32(), master_.f32() + lo_, part_);
      topo_.dp->all_gather(device_buffer(mine.f32(), part_, DType::kF32),
                           device_buffer(master_.f32(), padded_, DType::kF32));
    }
    refresh_compute_copy();
  }
  m.skipped_total = cfg_.precision == DType::kF16 ? scaler_.skipped_steps() : 0;
  m.loss = global_loss(local_loss);
  ++step_;
  m.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t samples = 0;
  for (const auto& mb : mbs) samples += mb.B;
  m.tokens_per_s = static_cast<double>(samples) * cfg_.model.seq_len * dp / m.step_time_s;
  m.mem_current = acct_.current();
  m.mem_peak = acct_.peak();
  return m;
}

std::optional<float> Trainer::evaluate() {
  DistributedSampler eval_sampler(eval_corpus_.size(), topo_.layout.dp, topo_.dp_rank, false, false,
                                  0);
  auto idx = eval_sampler.indices(0);
  std::vector<MicroBatch> mbs;
  for (size_t from = 0; from + static_cast<size_t>(cfg_.micro_batch) <= idx.size();
       from += static_cast<size_t>(cfg_.micro_batch)) {
    mbs.push_back(load(eval_corpus_, idx, from, cfg_.micro_batch));
  }
  if (mbs.empty()) return std::nullopt;
  const float local = forward_backward(mbs, false);
  return global_loss(local);
}

std::vector<StepMetrics> Trainer::run() {
  std::vector<StepMetrics> history;
  auto mark = std::chrono::steady_clock::now();
  int64_t comm_mark = comm::time_in_comm_ns();
  auto finish_step = [&](StepMetrics m, int epoch) {
    m.epoch = epoch;
    if (cfg_.eval_every > 0 && step_ % cfg_.eval_every == 0) m.eval_loss = evaluate();
    if (cfg_.check_replicas_every > 0 && step_ % cfg_.check_replicas_every == 0) {
      check_replicas();
    }
    const auto now = std::chrono::steady_clock::now();
    const int64_t comm_now = comm::time_in_comm_ns();
    m.interval_s = std::chrono::duration<double>(now - mark).count();
    m.comm_s = static_cast<double>(comm_now - comm_mark) * 1e-9;
    mark = now;
    comm_mark = comm_now;
    if (sink_) sink_(m);
    history.push_back(m);
  };
  const size_t mb = static_cast<size_t>(cfg_.micro_batch);
  if (cfg_.epochs > 0) {
    // Whole epochs of this rank's shard: a rank with fewer samples runs fewer steps.
    for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
      auto idx = sampler_.indices(epoch);
      size_t usable = cfg_.drop_last ? idx.size() / mb * mb : idx.size();
      size_t pos = 0;
      while (pos < usable) {
        std::vector<MicroBatch> mbs;
        for (int k = 0; k < cfg_.grad_accum && pos < usable; ++k) {
          const int count = static_cast<int>(std::min(mb, usable - pos));
          mbs.push_back(load(corpus_, idx, pos, count));
          pos += static_cast<size_t>(count);
        }
        finish_step(train_step(mbs), epoch);
      }
    }
    return history;
  }
  if (!cfg_.resume.empty()) load_checkpoint(cfg_.resume);
  if (cfg_.reset_loss_scale) {
    scaler_ = LossScaler(cfg_.loss_scale);
    if (topo_.rank == 0) std::printf("# loss scale reset to %g\n", scaler_.scale());
  }
  auto idx = sampler_.indices(epoch_);
  while (step_ < cfg_.steps) {
    std::vector<MicroBatch> mbs;
    for (int k = 0; k < cfg_.grad_accum; ++k) {
      if (pos_ + mb > idx.size()) {
        idx = sampler_.indices(++epoch_);
        pos_ = 0;
        if (idx.size() < mb) {
          raise("rank {} has {} samples per epoch, fewer than one micro-batch of {}", topo_.rank,
                idx.size(), mb);
        }
      }
      mbs.push_back(load(corpus_, idx, pos_, cfg_.micro_batch));
      pos_ += mb;
    }
    if (cfg_.skip_steps.count(step_)) {
      // The batches are consumed (the data position moves on) but nothing is trained on them.
      if (topo_.rank == 0) {
        std::printf("# step %lld: skipping its batches\n", static_cast<long long>(step_));
      }
      ++step_;
    } else {
      finish_step(train_step(mbs), epoch_);
    }
    if (!cfg_.save_dir.empty() &&
        ((cfg_.save_every > 0 && step_ % cfg_.save_every == 0) || step_ == cfg_.steps)) {
      save_checkpoint(cfg_.save_dir);
    }
  }
  return history;
}

void Trainer::check_replicas() const {
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

std::vector<float> Trainer::full_parameters() const {
  std::vector<float> full(total_);
  if (topo_.layout.zero == 3) {
    Tensor gathered = staging(padded_, DType::kF32, "params.full");
    topo_.dp->all_gather(device_buffer(master_.f32(), part_, DType::kF32),
                         device_buffer(gathered.f32(), padded_, DType::kF32));
    ops::to_host(full.data(), gathered.f32(), total_ * sizeof(float));
  } else {
    ops::to_host(full.data(), master_.f32(), total_ * sizeof(float));
  }
  return full;
}

}  // namespace fl::train
