#include "workloads/parallel/zero.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "workloads/comm/communicator.hpp"

namespace fl::parallel {

namespace {
using comm::device_buffer;
using comm::host_buffer;
}  // namespace

void validate(const ZeroConfig& z, size_t total_params, int dp) {
  const size_t model_bytes = total_params * sizeof(float);
  if (z.offload_optimizer && z.stage < 1) {
    raise<ConfigError>(
        "--offload-optimizer needs ZeRO stage 1, 2 or 3 (the offloaded state is the rank's "
        "partition), but --zero is 0");
  }
  auto bucket = [&](const char* option, size_t bytes) {
    if (bytes > model_bytes) {
      raise<ConfigError>(
          "{} {} is larger than the model ({} bytes on this rank); allowed: 1 to {} bytes, or 0 "
          "for the default",
          option, bytes, model_bytes, model_bytes);
    }
  };
  bucket("--reduce-bucket-size", z.reduce_bucket_bytes);
  bucket("--allgather-bucket-size", z.allgather_bucket_bytes);
  if (z.allgather_bucket_bytes != 0 && z.allgather_bucket_bytes < sizeof(float) * dp) {
    raise<ConfigError>(
        "--allgather-bucket-size {} is smaller than one element per rank ({} bytes for dp {})",
        z.allgather_bucket_bytes, sizeof(float) * dp, dp);
  }
  if (z.stage != 3 && (z.prefetch_bytes >= 0 || z.max_live_bytes >= 0)) {
    raise<ConfigError>(
        "--zero3-prefetch-bytes and --zero3-max-live-bytes apply to ZeRO stage 3 only, but --zero "
        "is {}",
        z.stage);
  }
  if (z.prefetch_bytes < -1 || z.max_live_bytes < -1) {
    raise<ConfigError>("--zero3-prefetch-bytes and --zero3-max-live-bytes must be 0 or more");
  }
}

namespace {
size_t or_default(size_t bytes, size_t model_bytes) {
  return bytes != 0 ? bytes : std::min<size_t>(1 << 20, model_bytes);
}
}  // namespace

ZeroEngine::ZeroEngine(ZeroConfig cfg, const model::ParamLayout& layout, Topology& topo,
                       MemoryAccountant& device, MemoryAccountant& host, MemoryAccountant& staging)
    : cfg_(cfg), layout_(layout), topo_(topo), dev_(device), host_(host), staging_(staging) {
  dp_ = topo.layout.dp;
  dp_rank_ = topo.dp_rank;
  mixed_ = cfg_.precision != DType::kF32;
  total_ = layout_.total();
  validate(cfg_, total_, dp_);
  cfg_.reduce_bucket_bytes = or_default(cfg_.reduce_bucket_bytes, total_ * sizeof(float));
  cfg_.allgather_bucket_bytes = or_default(cfg_.allgather_bucket_bytes, total_ * sizeof(float));
  if (cfg_.prefetch_bytes < 0) cfg_.prefetch_bytes = 1 << 20;
  if (cfg_.max_live_bytes < 0) cfg_.max_live_bytes = 0;
  const auto udp = static_cast<size_t>(dp_);
  part_ = (total_ + udp - 1) / udp;
  padded_ = part_ * udp;
  lo_ = std::min(total_, part_ * static_cast<size_t>(dp_rank_));
  hi_ = std::min(total_, lo_ + part_);
  // In fp16/bf16 the fp32 weights are the optimizer's master copy (ZeRO's K counts them).
  const char* master_name = mixed_ ? "optimizer.master" : "params.weights";
  auto fill = [&](Tensor& t, size_t lo, size_t hi) {
    if (t.device().is_cuda()) {
      std::vector<float> h(hi - lo);
      layout_.initialize_range(h.data(), lo, hi, cfg_.seed);
      ops::from_host(t.f32(), h.data(), h.size() * sizeof(float));
    } else {
      layout_.initialize_range(t.f32(), lo, hi, cfg_.seed);
    }
  };
  if (cfg_.stage == 3) {
    if (cfg_.zero_init) {
      master_ = alloc(part_, master_name, dev_);
      fill(master_, lo_, hi_);
    } else {
      // The whole model exists on every rank before it is partitioned.
      Tensor full = alloc(padded_, "params.init.full_model", dev_);
      fill(full, 0, total_);
      master_ = alloc(part_, master_name, dev_);
      ops::copy(master_.f32(), full.f32() + lo_, hi_ - lo_);
    }
  } else {
    // The weights the forward reads: fp32 (they are the master weights) or rounded to the
    // precision, built whole; under fp16/bf16 with stage 1-2 the fp32 master weights are then
    // only the rank's partition.
    Tensor& full = mixed_ ? compute_ : master_;
    full = alloc(padded_, mixed_ ? "params.compute" : master_name, dev_);
    fill(full, 0, total_);
    if (cfg_.broadcast_init && dp_ > 1) {
      topo_.dp->broadcast(device_buffer(full.f32(), padded_, DType::kF32), 0);
    }
    if (mixed_) {
      master_ = alloc(partitioned_master() ? part_ : padded_, master_name, dev_);
      ops::copy(master_.f32(), full.f32() + (partitioned_master() ? part_ * udp_rank() : 0),
                master_.numel());
      ops::round_to_precision(compute_.f32(), padded_, cfg_.precision);
    }
  }
  grads_ =
      cfg_.stage >= 2 ? alloc(part_, "grads.partition", dev_) : alloc(padded_, "grads.full", dev_);
  MemoryAccountant& state = cfg_.offload_optimizer ? host_ : dev_;
  const size_t moments = cfg_.stage == 0 ? padded_ : part_;
  m_ = alloc(cfg_.optimizer_state_bytes >= 4 ? moments : 0, cfg_.state_name.c_str(), state);
  v_ = alloc(cfg_.optimizer_state_bytes >= 8 ? moments : 0, "optimizer.exp_avg_sq", state);
  if (cfg_.offload_optimizer) {
    host_master_ = alloc(part_, "optimizer.master.offload", host_);
    host_grads_ = alloc(part_, "grads.offload", host_);
    restored();
  }
  // Gradient buckets for stages 2-3: whole groups in backward order (last group first); a group
  // that would overflow the bucket starts the next one.
  const auto& groups = layout_.groups();
  bucket_of_.assign(groups.size(), -1);
  const size_t bucket_elems = std::max<size_t>(1, cfg_.reduce_bucket_bytes / sizeof(float));
  for (int g = static_cast<int>(groups.size()) - 1; g >= 0; --g) {
    const size_t n = groups[static_cast<size_t>(g)].numel();
    if (buckets_.empty() || buckets_.back().hi - buckets_.back().lo + n > bucket_elems) {
      buckets_.push_back(
          {g, g, groups[static_cast<size_t>(g)].lo, groups[static_cast<size_t>(g)].hi});
    }
    Bucket& b = buckets_.back();
    b.last = g;
    b.lo = groups[static_cast<size_t>(g)].lo;
    bucket_of_[static_cast<size_t>(g)] = static_cast<int>(buckets_.size()) - 1;
  }
}

Tensor ZeroEngine::alloc(size_t n, const char* what, MemoryAccountant& where) const {
  return Tensor::zeros({static_cast<int64_t>(n)}, DType::kF32, what, where);
}

void ZeroEngine::refresh_compute_copy() {
  if (!compute_.defined()) return;
  if (partitioned_master()) {
    all_gather_partitions(master_.f32(), compute_.f32());
  } else {
    ops::copy(compute_.f32(), master_.f32(), padded_);
  }
  ops::round_to_precision(compute_.f32(), padded_, cfg_.precision);
}

void ZeroEngine::all_gather_partitions(const float* mine, float* full) {
  // allgather_bucket_bytes per round: every rank contributes a piece of its partition, the
  // pieces land rank by rank in a staging buffer and are then copied into place.
  const auto udp = static_cast<size_t>(dp_);
  const size_t k = std::max<size_t>(1, cfg_.allgather_bucket_bytes / sizeof(float) / udp);
  Tensor out = alloc(std::min(k, part_) * udp, "buffer.allgather", dev_);
  for (size_t off = 0; off < part_; off += k) {
    const size_t kc = std::min(k, part_ - off);
    topo_.dp->all_gather(device_buffer(const_cast<float*>(mine) + off, kc, DType::kF32),
                         device_buffer(out.f32(), kc * udp, DType::kF32));
    for (size_t r = 0; r < udp; ++r) {
      float* dst = full + r * part_ + off;
      if (dst == mine + off) continue;  // already in place
      ops::copy(dst, out.f32() + r * kc, kc);
    }
  }
}

void ZeroEngine::restored() {
  if (cfg_.offload_optimizer) {
    const float* mine = master_.f32() + (partitioned_master() ? 0 : lo_);
    ops::to_host(host_master_.f32(), mine, (hi_ - lo_) * sizeof(float));
  }
  refresh_compute_copy();
  drop_gathered();
}

size_t ZeroEngine::gathered_bytes() const {
  size_t b = 0;
  for (const auto& [g, t] : live_) b += t.bytes();
  return b;
}

void ZeroEngine::gather(int g) {
  const model::ParamGroup& grp = layout_.groups()[static_cast<size_t>(g)];
  Tensor t = alloc(grp.numel(), "gather.params", dev_);
  // Each owner broadcasts its slice of the group (contiguous partitions: one or a few owners).
  for (int r = 0; r < dp_; ++r) {
    const size_t rlo = std::max(grp.lo, part_ * static_cast<size_t>(r));
    const size_t rhi = std::min({grp.hi, part_ * static_cast<size_t>(r + 1), total_});
    if (rlo >= rhi) continue;
    float* dst = t.f32() + (rlo - grp.lo);
    if (r == dp_rank_) ops::copy(dst, master_.f32() + (rlo - lo_), rhi - rlo);
    if (dp_ > 1) topo_.dp->broadcast(device_buffer(dst, rhi - rlo, DType::kF32), r);
  }
  ops::round_to_precision(t.f32(), grp.numel(), cfg_.precision);
  live_[g] = std::move(t);
}

void ZeroEngine::prefetch_after(int g, bool backward) {
  auto budget = static_cast<size_t>(cfg_.prefetch_bytes);
  const int n = static_cast<int>(layout_.groups().size());
  // The embedding's backward reads no weights: the backward never prefetches it.
  const int stop = backward ? (layout_.has_embedding() ? 1 : 0) : n - 1;
  for (int h = backward ? g - 1 : g + 1; backward ? h >= stop : h <= stop; h += backward ? -1 : 1) {
    const size_t bytes = layout_.groups()[static_cast<size_t>(h)].numel() * sizeof(float);
    if (live_.count(h)) continue;
    if (bytes > budget) break;
    gather(h);
    budget -= bytes;
  }
}

const float* ZeroEngine::acquire(int g, bool backward) {
  if (cfg_.stage < 3) {
    const float* p = compute_.defined() ? compute_.f32() : master_.f32();
    return p + layout_.groups()[static_cast<size_t>(g)].lo;
  }
  if (!live_.count(g)) gather(g);
  if (cfg_.prefetch_bytes > 0) prefetch_after(g, backward);
  return live_.at(g).f32();
}

void ZeroEngine::release(int g, bool) {
  if (cfg_.stage < 3) return;
  if (cfg_.max_live_bytes > 0 && gathered_bytes() <= static_cast<size_t>(cfg_.max_live_bytes)) {
    return;
  }
  live_.erase(g);
}

void ZeroEngine::drop_gathered() {
  live_.clear();
}

float* ZeroEngine::grads(int g) {
  const model::ParamGroup& grp = layout_.groups()[static_cast<size_t>(g)];
  if (cfg_.stage < 2) return grads_.f32() + grp.lo;
  const int b = bucket_of_[static_cast<size_t>(g)];
  auto it = pending_.find(b);
  if (it == pending_.end()) {
    const Bucket& bk = buckets_[static_cast<size_t>(b)];
    it = pending_.emplace(b, alloc(bk.hi - bk.lo, "buffer.grad_bucket", dev_)).first;
  }
  return it->second.f32() + (grp.lo - buckets_[static_cast<size_t>(b)].lo);
}

void ZeroEngine::grads_done(int g) {
  if (cfg_.stage < 2) return;
  const int b = bucket_of_[static_cast<size_t>(g)];
  const Bucket& bk = buckets_[static_cast<size_t>(b)];
  if (g != bk.last) return;
  auto it = pending_.find(b);
  if (it == pending_.end()) raise("ZeRO: bucket {} completed without gradients", b);
  reduce_bucket(bk, it->second.f32());
  pending_.erase(it);
}

void ZeroEngine::all_reduce_avg(float* data, size_t n) {
  comm::Communicator& c = *topo_.dp;
  if (!mixed_) {
    c.all_reduce(device_buffer(data, n, DType::kF32), comm::ReduceOp::kAvg);
    return;
  }
  // Gradients travel in the training precision.
  Tensor tmp16 =
      Tensor::zeros({static_cast<int64_t>(n)}, cfg_.precision, "buffer.grad16", staging_);
  ops::encode(data, tmp16.raw(), cfg_.precision, n);
  c.all_reduce(device_buffer(tmp16.raw(), n, cfg_.precision), comm::ReduceOp::kAvg);
  ops::decode(tmp16.raw(), cfg_.precision, data, n);
}

void ZeroEngine::reduce_bucket(const Bucket& b, float* data) {
  // The Communicator has no rooted reduce: the bucket is all-reduced and each rank keeps the
  // slice that falls in its partition (DeepSpeed reduces each slice to its owner instead).
  if (dp_ > 1) all_reduce_avg(data, b.hi - b.lo);
  const size_t from = std::max(b.lo, lo_), to = std::min(b.hi, hi_);
  if (from >= to) return;
  float* mine = grads_.f32() + (from - lo_);
  ops::residual_forward(mine, mine, data + (from - b.lo), to - from);
}

void ZeroEngine::begin_step() {
  ops::zero(grads_.f32(), grads_.numel() * sizeof(float));
  pending_.clear();
}

void ZeroEngine::finish_gradients() {
  if (!pending_.empty()) raise("ZeRO: {} gradient bucket(s) never completed", pending_.size());
  if (cfg_.stage >= 2 || dp_ == 1) return;
  // Stages 0-1: bucketed all-reduce (average) of the full gradients.
  const size_t bucket = std::max<size_t>(1, cfg_.reduce_bucket_bytes / sizeof(float));
  for (size_t off = 0; off < padded_; off += bucket) {
    all_reduce_avg(grads_.f32() + off, std::min(bucket, padded_ - off));
  }
}

FlatSpan ZeroEngine::owned_grads() {
  if (cfg_.stage < 2) return {grads_.f32(), 0, total_};
  return {grads_.f32(), lo_, hi_};
}

ZeroEngine::Update ZeroEngine::begin_update() {
  const size_t n = cfg_.stage == 0 ? total_ : hi_ - lo_;
  float* g = cfg_.stage == 0 ? grads_.f32() : cfg_.stage == 1 ? grads_.f32() + lo_ : grads_.f32();
  float* p = cfg_.stage == 0 || partitioned_master() ? master_.f32() : master_.f32() + lo_;
  if (cfg_.offload_optimizer) {
    ops::to_host(host_grads_.f32(), g, n * sizeof(float));
    return {host_master_.f32(), host_grads_.f32(), m_.f32(), v_.f32(), n, Device::cpu()};
  }
  return {p, g, m_.f32(), v_.f32(), n, dev_.device()};
}

void ZeroEngine::finish_update() {
  const size_t n = cfg_.stage == 0 ? total_ : hi_ - lo_;
  if (cfg_.offload_optimizer) {
    float* p = partitioned_master() ? master_.f32() : master_.f32() + lo_;
    ops::from_host(p, host_master_.f32(), n * sizeof(float));
  }
  if ((cfg_.stage == 1 || cfg_.stage == 2) && !partitioned_master() && dp_ > 1) {
    // fp32: each rank updated its slice of the weights; gather the others' back.
    all_gather_partitions(master_.f32() + part_ * udp_rank(), master_.f32());
  }
  refresh_compute_copy();  // fp16/bf16 stages 1-2: gathers the master partitions into it
  drop_gathered();
}

std::vector<float> ZeroEngine::full_parameters() const {
  std::vector<float> full(total_);
  if (partitioned_master()) {
    Tensor gathered =
        Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32, "buffer.full", staging_);
    topo_.dp->all_gather(device_buffer(master_.f32(), part_, DType::kF32),
                         device_buffer(gathered.f32(), padded_, DType::kF32));
    ops::to_host(full.data(), gathered.f32(), total_ * sizeof(float));
  } else {
    ops::to_host(full.data(), master_.f32(), total_ * sizeof(float));
  }
  return full;
}

}  // namespace fl::parallel
