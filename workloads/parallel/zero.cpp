#include "workloads/parallel/zero.hpp"

#include <algorithm>
#include <functional>

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
  // DeepSpeed's stage3_prefetch_bucket_size counts elements: the default is 262144 parameters
  // (1 MiB in fp32, 512 KiB in fp16/bf16), so 16-bit gathers do not prefetch twice the groups.
  if (cfg_.prefetch_bytes < 0) {
    cfg_.prefetch_bytes = static_cast<int64_t>((1 << 20) / sizeof(float) * store_bytes());
  }
  if (cfg_.max_live_bytes < 0) cfg_.max_live_bytes = 0;
  const auto udp = static_cast<size_t>(dp_);
  part_ = (total_ + udp - 1) / udp;
  padded_ = part_ * udp;
  lo_ = std::min(total_, part_ * static_cast<size_t>(dp_rank_));
  hi_ = std::min(total_, lo_ + part_);
  init_weights();
  // The 16-bit weights from the master copy (stages 1-2 were encoded whole by init_weights: no
  // gather).
  if (mixed_ && (cfg_.stage == 0 || cfg_.stage == 3)) publish_master();
  alloc_grads_and_optimizer_state();
  plan_grad_buckets();
}

void ZeroEngine::init_weights() {
  // In fp16/bf16 the fp32 weights are the optimizer's master copy (ZeRO's K counts them); with
  // offload they are born on the host and never held by the device.
  const bool host_master = master_on_host();
  Tensor& master = host_master ? host_master_ : master_;
  MemoryAccountant& master_acct = host_master ? host_ : dev_;
  const char* master_name = host_master ? "optimizer.master.offload"
                            : mixed_    ? "optimizer.master"
                                        : "params.weights";
  if (cfg_.stage == 3) {
    master = alloc(part_, master_name, master_acct);
    if (cfg_.zero_init) {
      fill_range(master.f32(), lo_, hi_, master_acct.device());
    } else if (!mixed_) {
      // The whole model exists on every rank before it is partitioned.
      Tensor full = alloc(padded_, "params.init.full_model", dev_);
      fill_range(full.f32(), 0, total_, dev_.device());
      take_chunk(full.f32(), 0, padded_, nullptr, master, host_master);
    } else {
      // The whole model exists on every rank before it is partitioned, in the stored format
      // (a 16-bit model arrives in 2 bytes per parameter, as after DeepSpeed's module.half()).
      Tensor full = alloc(padded_, "params.init.full_model", dev_, store());
      build_in_chunks(false, [&](const float* chunk, size_t off, size_t n) {
        take_chunk(chunk, off, n, full.raw(), master, host_master);
      });
    }
    if (mixed_) part16_ = alloc(part_, "params.partition", dev_, cfg_.precision);
  } else if (!mixed_ || cfg_.stage == 0) {
    // The weights the forward reads are built whole: fp32 (they are the master weights), or
    // under fp16/bf16 stage 0 the full fp32 master copy, encoded into the 16-bit weights below.
    master_ = alloc(padded_, master_name, dev_);
    fill_range(master_.f32(), 0, total_, dev_.device());
    if (cfg_.broadcast_init && dp_ > 1) {
      topo_.dp->broadcast(device_buffer(master_.f32(), padded_, DType::kF32), 0);
    }
    if (mixed_) compute_ = alloc(padded_, "params.compute", dev_, cfg_.precision);
  } else {
    // fp16/bf16 stages 1-2: the initial fp32 weights are built one allgather bucket at a time
    // (never 4Ψ at once); each chunk is encoded into the 16-bit weights and the master weights
    // keep the rank's partition of it.
    master = alloc(part_, master_name, master_acct);
    compute_ = alloc(padded_, "params.compute", dev_, cfg_.precision);
    build_in_chunks(cfg_.broadcast_init, [&](const float* chunk, size_t off, size_t n) {
      take_chunk(chunk, off, n, compute_.raw(), master, host_master);
    });
  }
}

void ZeroEngine::fill_range(float* dst, size_t lo, size_t hi, Device where) const {
  if (where.is_cuda()) {
    std::vector<float> h(hi - lo);
    layout_.initialize_range(h.data(), lo, hi, cfg_.seed);
    ops::from_host(dst, h.data(), h.size() * sizeof(float));
  } else {
    layout_.initialize_range(dst, lo, hi, cfg_.seed);
  }
}

void ZeroEngine::build_in_chunks(bool broadcast,
                                 const std::function<void(const float*, size_t, size_t)>& take) {
  const size_t k = std::min(padded_, cfg_.allgather_bucket_bytes / sizeof(float));
  Tensor chunk = alloc(k, "buffer.init_weights", dev_);
  for (size_t off = 0; off < padded_; off += k) {
    const size_t n = std::min(k, padded_ - off);
    ops::zero(chunk.raw(), chunk.bytes());  // the padding past the model stays 0
    if (off < total_) fill_range(chunk.f32(), off, std::min(off + n, total_), dev_.device());
    if (broadcast && dp_ > 1) topo_.dp->broadcast(device_buffer(chunk.f32(), n, DType::kF32), 0);
    take(chunk.f32(), off, n);
  }
}

void ZeroEngine::take_chunk(const float* chunk, size_t off, size_t n, void* whole, Tensor& master,
                            bool host_master) const {
  // `whole` (the 16-bit weights, n elements from off) takes the chunk; nullptr: only the master.
  if (whole != nullptr) {
    ops::encode(chunk, static_cast<char*>(whole) + off * store_bytes(), cfg_.precision, n);
  }
  // The part of the chunk in this rank's partition [part·r, part·(r+1)) goes to the master.
  const size_t mlo = part_ * udp_rank(), mhi = mlo + part_;
  const size_t from = std::max(off, mlo), to = std::min(off + n, mhi);
  if (from >= to) return;
  float* dst = master.f32() + (from - mlo);
  if (host_master) {
    ops::to_host(dst, chunk + (from - off), (to - from) * sizeof(float));
  } else {
    ops::copy(dst, chunk + (from - off), to - from);
  }
}

void ZeroEngine::alloc_grads_and_optimizer_state() {
  grads_ = cfg_.stage >= 2 ? alloc(part_, "grads.partition", dev_, store())
                           : alloc(padded_, "grads.full", dev_, store());
  MemoryAccountant& state = cfg_.offload_optimizer ? host_ : dev_;
  const size_t moments = cfg_.stage == 0 ? padded_ : part_;
  m_ = alloc(cfg_.optimizer_state_bytes >= 4 ? moments : 0, cfg_.state_name.c_str(), state);
  v_ = alloc(cfg_.optimizer_state_bytes >= 8 ? moments : 0, "optimizer.exp_avg_sq", state);
  if (cfg_.offload_optimizer) {
    if (!master_on_host()) {
      // fp32: the device keeps the weights (they are the parameters); the host updates a copy.
      host_master_ = alloc(part_, "optimizer.master.offload", host_);
      const float* mine = master_.f32() + (partitioned_master() ? 0 : lo_);
      ops::to_host(host_master_.f32(), mine, (hi_ - lo_) * sizeof(float));
    }
    host_grads_ = alloc(part_, "grads.offload", host_);
  }
}

void ZeroEngine::plan_grad_buckets() {
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

Tensor ZeroEngine::alloc(size_t n, const char* what, MemoryAccountant& where, DType t) const {
  return Tensor::zeros({static_cast<int64_t>(n)}, t, what, where);
}

void ZeroEngine::publish_master() {
  if (!mixed_) return;
  const size_t es = store_bytes();
  const size_t n = master_.defined() ? master_.numel() : host_master_.numel();
  void* dst = cfg_.stage == 3 ? part16_.raw()
                              : static_cast<char*>(compute_.raw()) +
                                    (partitioned_master() ? part_ * udp_rank() * es : 0);
  if (master_.defined()) {
    ops::encode(master_.f32(), dst, cfg_.precision, n);
  } else {
    // The master weights live on the host: encoded there, the 16-bit values copied over.
    Tensor h = alloc(n, "buffer.offload16", host_, cfg_.precision);
    {
      DeviceGuard on_host(Device::cpu());
      ops::encode(host_master_.f32(), h.raw(), cfg_.precision, n);
    }
    ops::from_host(dst, h.raw(), n * es);
  }
  if ((cfg_.stage == 1 || cfg_.stage == 2) && dp_ > 1) {
    all_gather_partitions(dst, compute_.raw(), cfg_.precision);
  }
}

void ZeroEngine::all_gather_partitions(const void* mine, void* full, DType t) {
  // allgather_bucket_bytes per round: every rank contributes a piece of its partition, the
  // pieces land rank by rank in a staging buffer and are then copied into place.
  const auto udp = static_cast<size_t>(dp_);
  const size_t es = dtype_size(t);
  const size_t k = std::max<size_t>(1, cfg_.allgather_bucket_bytes / es / udp);
  Tensor out = alloc(std::min(k, part_) * udp, "buffer.allgather", dev_, t);
  const auto* src = static_cast<const char*>(mine);
  auto* dst_base = static_cast<char*>(full);
  auto* staged = static_cast<char*>(out.raw());
  for (size_t off = 0; off < part_; off += k) {
    const size_t kc = std::min(k, part_ - off);
    topo_.dp->all_gather(device_buffer(const_cast<char*>(src) + off * es, kc, t),
                         device_buffer(staged, kc * udp, t));
    for (size_t r = 0; r < udp; ++r) {
      char* dst = dst_base + (r * part_ + off) * es;
      if (dst == src + off * es) continue;  // already in place
      ops::copy_bytes(dst, staged + r * kc * es, kc * es);
    }
  }
}

void ZeroEngine::restored() {
  if (cfg_.offload_optimizer && master_.defined()) {
    // fp32: the host's copy of the partition follows the restored weights.
    const float* mine = master_.f32() + (partitioned_master() ? 0 : lo_);
    ops::to_host(host_master_.f32(), mine, (hi_ - lo_) * sizeof(float));
  }
  publish_master();
  drop_gathered();
}

size_t ZeroEngine::largest_bucket_bytes() const {
  size_t most = 0;
  if (cfg_.stage >= 2) {
    for (const Bucket& b : buckets_) most = std::max(most, b.hi - b.lo);
  }
  return most * store_bytes();
}

size_t ZeroEngine::largest_gather_bytes() const {
  size_t most = 0;
  if (cfg_.stage == 3) {
    for (const auto& g : layout_.groups()) most = std::max(most, g.numel());
  }
  return most * store_bytes();
}

size_t ZeroEngine::gathered_bytes() const {
  size_t b = 0;
  for (const auto& [g, t] : live_) b += t.bytes();
  return b;
}

void ZeroEngine::gather(int g) {
  const model::ParamGroup& grp = layout_.groups()[static_cast<size_t>(g)];
  const size_t es = store_bytes();
  // In the stored format: 16-bit under fp16/bf16 (the partition is already rounded).
  Tensor t = alloc(grp.numel(), "gather.params", dev_, store());
  // Each owner broadcasts its slice of the group (contiguous partitions: one or a few owners).
  for (int r = 0; r < dp_; ++r) {
    const size_t rlo = std::max(grp.lo, part_ * static_cast<size_t>(r));
    const size_t rhi = std::min({grp.hi, part_ * static_cast<size_t>(r + 1), total_});
    if (rlo >= rhi) continue;
    char* dst = static_cast<char*>(t.raw()) + (rlo - grp.lo) * es;
    if (r == dp_rank_) {
      const Tensor& mine = mixed_ ? part16_ : master_;
      ops::copy_bytes(dst, static_cast<const char*>(mine.raw()) + (rlo - lo_) * es,
                      (rhi - rlo) * es);
    }
    if (dp_ > 1) topo_.dp->broadcast(device_buffer(dst, rhi - rlo, store()), r);
  }
  live_[g] = std::move(t);
}

void ZeroEngine::prefetch_after(int g, bool backward) {
  auto budget = static_cast<size_t>(cfg_.prefetch_bytes);
  const int n = static_cast<int>(layout_.groups().size());
  // The embedding's backward reads no weights: the backward never prefetches it.
  const int stop = backward ? (layout_.has_embedding() ? 1 : 0) : n - 1;
  for (int h = backward ? g - 1 : g + 1; backward ? h >= stop : h <= stop; h += backward ? -1 : 1) {
    const size_t bytes = layout_.groups()[static_cast<size_t>(h)].numel() * store_bytes();
    if (live_.count(h)) continue;
    if (bytes > budget) break;
    gather(h);
    budget -= bytes;
  }
}

const float* ZeroEngine::decoded(int g, const void* src16) {
  auto it = params32_.find(g);
  if (it == params32_.end()) {
    const size_t n = layout_.groups()[static_cast<size_t>(g)].numel();
    Tensor t = alloc(n, "buffer.params_f32", dev_);
    ops::decode(src16, cfg_.precision, t.f32(), n);
    it = params32_.emplace(g, std::move(t)).first;
  }
  return it->second.f32();
}

const void* ZeroEngine::acquire_stored(int g, bool backward) {
  const model::ParamGroup& grp = layout_.groups()[static_cast<size_t>(g)];
  if (cfg_.stage < 3) {
    if (!mixed_) return master_.f32() + grp.lo;
    return static_cast<const char*>(compute_.raw()) + grp.lo * store_bytes();
  }
  if (!live_.count(g)) gather(g);
  if (cfg_.prefetch_bytes > 0) prefetch_after(g, backward);
  return live_.at(g).raw();
}

const float* ZeroEngine::acquire(int g, bool backward) {
  const void* values = acquire_stored(g, backward);
  return mixed_ ? decoded(g, values) : static_cast<const float*>(values);
}

void ZeroEngine::release(int g, bool) {
  params32_.erase(g);
  if (cfg_.stage < 3) return;
  if (cfg_.max_live_bytes > 0 && gathered_bytes() <= static_cast<size_t>(cfg_.max_live_bytes)) {
    return;
  }
  live_.erase(g);
}

void ZeroEngine::drop_gathered() {
  live_.clear();
  params32_.clear();
}

void* ZeroEngine::grads_stored(int g) {
  const model::ParamGroup& grp = layout_.groups()[static_cast<size_t>(g)];
  if (cfg_.stage < 2) return static_cast<char*>(grads_.raw()) + grp.lo * store_bytes();
  const int b = bucket_of_[static_cast<size_t>(g)];
  const Bucket& bk = buckets_[static_cast<size_t>(b)];
  auto it = pending_.find(b);
  if (it == pending_.end()) {
    it = pending_.emplace(b, alloc(bk.hi - bk.lo, "buffer.grad_bucket", dev_, store())).first;
  }
  return static_cast<char*>(it->second.raw()) + (grp.lo - bk.lo) * store_bytes();
}

float* ZeroEngine::grads(int g) {
  void* stored = grads_stored(g);
  if (!mixed_) return static_cast<float*>(stored);
  // The group's 16-bit gradients decoded for the backward to accumulate into.
  auto it = grads32_of_.find(g);
  if (it == grads32_of_.end()) {
    const size_t n = layout_.groups()[static_cast<size_t>(g)].numel();
    Tensor t = alloc(n, "buffer.grads_f32", dev_);
    ops::decode(stored, cfg_.precision, t.f32(), n);
    it = grads32_of_.emplace(g, std::move(t)).first;
  }
  return it->second.f32();
}

void ZeroEngine::grads_done(int g) {
  auto it = grads32_of_.find(g);
  if (it != grads32_of_.end()) {
    // The backward rounded them to the precision: storing them in 16 bits loses nothing.
    ops::encode(it->second.f32(), grads_stored(g), cfg_.precision, it->second.numel());
    grads32_of_.erase(it);
  }
  if (cfg_.stage < 2) return;
  const int b = bucket_of_[static_cast<size_t>(g)];
  const Bucket& bk = buckets_[static_cast<size_t>(b)];
  if (g != bk.last) return;
  auto pit = pending_.find(b);
  if (pit == pending_.end()) raise("ZeRO: bucket {} completed without gradients", b);
  reduce_bucket(bk, pit->second.raw());
  pending_.erase(pit);
}

void ZeroEngine::all_reduce_avg(float* data, size_t n) {
  topo_.dp->all_reduce(device_buffer(data, n, DType::kF32), comm::ReduceOp::kAvg);
}

void ZeroEngine::reduce_bucket(const Bucket& b, void* data) {
  // The Communicator has no rooted reduce: the bucket is all-reduced (in the stored format) and
  // each rank keeps the slice that falls in its partition (DeepSpeed reduces each slice to its
  // owner instead).
  if (dp_ > 1) {
    topo_.dp->all_reduce(device_buffer(data, b.hi - b.lo, store()), comm::ReduceOp::kAvg);
  }
  const size_t from = std::max(b.lo, lo_), to = std::min(b.hi, hi_);
  if (from >= to) return;
  const size_t es = store_bytes();
  const char* slice = static_cast<const char*>(data) + (from - b.lo) * es;
  if (!mixed_) {
    float* mine = grads_.f32() + (from - lo_);
    ops::residual_forward(mine, mine, reinterpret_cast<const float*>(slice), to - from);
    return;
  }
  // The 16-bit partition: the sum is rounded as it is stored (with one micro-batch per step it
  // is the reduced bucket itself, already in the precision), in fp32 scratch 16384 elements at
  // a time (the CPU kernels' scratch: a GPU adds the 16-bit values in registers).
  const size_t k = std::min<size_t>(to - from, 16384);
  Tensor acc = alloc(k, "buffer.grad_accum", dev_), add = alloc(k, "buffer.grad_accum", dev_);
  for (size_t off = 0; off < to - from; off += k) {
    const size_t n = std::min(k, to - from - off);
    char* mine = static_cast<char*>(grads_.raw()) + (from - lo_ + off) * es;
    ops::decode(mine, cfg_.precision, acc.f32(), n);
    ops::decode(slice + off * es, cfg_.precision, add.f32(), n);
    ops::residual_forward(acc.f32(), acc.f32(), add.f32(), n);
    ops::encode(acc.f32(), mine, cfg_.precision, n);
  }
}

void ZeroEngine::begin_step() {
  ops::zero(grads_.raw(), grads_.bytes());
  pending_.clear();
  grads32_of_.clear();
  grads32_.release();
}

void ZeroEngine::finish_gradients() {
  if (!pending_.empty()) raise("ZeRO: {} gradient bucket(s) never completed", pending_.size());
  if (cfg_.stage >= 2 || dp_ == 1) return;
  // Stages 0-1: bucketed all-reduce (average) of the full gradients, in the stored format.
  const size_t bucket = std::max<size_t>(1, cfg_.reduce_bucket_bytes / sizeof(float));
  for (size_t off = 0; off < padded_; off += bucket) {
    const size_t n = std::min(bucket, padded_ - off);
    if (!mixed_) {
      all_reduce_avg(grads_.f32() + off, n);
    } else {
      topo_.dp->all_reduce(
          device_buffer(static_cast<char*>(grads_.raw()) + off * store_bytes(), n, store()),
          comm::ReduceOp::kAvg);
    }
  }
}

void ZeroEngine::sum_grads_over(comm::Communicator& group, size_t lo, size_t n) {
  if (cfg_.stage >= 2) {
    raise<ConfigError>(
        "ZeRO stage {} keeps a partition of the gradients; the tied embedding's gradients are "
        "summed over the embedding group at stages 0-1 only",
        cfg_.stage);
  }
  Tensor zeros;
  void* data = nullptr;
  if (lo == kNoElements) {
    zeros = Tensor::zeros({static_cast<int64_t>(n)}, store(), "buffer.embedding_grads", staging_);
    data = zeros.raw();
  } else {
    if (lo + n > total_)
      raise("ZeRO: gradient range [{}, {}) beyond {} elements", lo, lo + n, total_);
    data = static_cast<char*>(grads_.raw()) + lo * store_bytes();
  }
  group.all_reduce(device_buffer(data, n, store()), comm::ReduceOp::kSum);
}

bool ZeroEngine::judges_all_grads() const {
  // fp16/bf16 stage 1 converts only its partition to fp32, as DeepSpeed's stage 1 does.
  return cfg_.stage == 0 || (cfg_.stage == 1 && !mixed_);
}

size_t ZeroEngine::chunk_elems() const {
  return std::max<size_t>(1, cfg_.reduce_bucket_bytes / sizeof(float));
}

size_t ZeroEngine::owned_chunks() const {
  if (!mixed_) return 1;
  const size_t n = judges_all_grads() ? total_ : hi_ - lo_;
  return std::max<size_t>(1, (n + chunk_elems() - 1) / chunk_elems());
}

FlatSpan ZeroEngine::owned_grads(size_t chunk) {
  const bool all = judges_all_grads();
  const size_t lo = all ? 0 : lo_, hi = all ? total_ : hi_;
  if (!mixed_) return {grads_.f32(), lo, hi};
  const size_t clo = std::min(hi, lo + chunk * chunk_elems());
  const size_t chi = std::min(hi, clo + chunk_elems());
  if (grads32_.defined() && grads32_chunk_ == chunk) return {grads32_.f32(), clo, chi};
  // The optimizer works in fp32: a copy of this chunk of the 16-bit gradients (stages 0-1 hold
  // all of them, stages 2-3 the partition from element lo_).
  const size_t first = cfg_.stage >= 2 ? clo - lo_ : clo;
  grads32_.release();
  grads32_ = alloc(chi - clo, "buffer.grads_f32", dev_);
  grads32_chunk_ = chunk;
  ops::decode(static_cast<const char*>(grads_.raw()) + first * store_bytes(), cfg_.precision,
              grads32_.f32(), chi - clo);
  return {grads32_.f32(), clo, chi};
}

namespace {
float* at(const Tensor& t, size_t off) {
  return t.defined() && t.numel() > 0 ? t.f32() + off : nullptr;
}
}  // namespace

ZeroEngine::Update ZeroEngine::begin_update(size_t chunk) {
  size_t n = cfg_.stage == 0 ? total_ : hi_ - lo_;
  size_t off = 0;  // of the chunk in the rank's elements
  if (mixed_) {
    if (!grads32_.defined() || grads32_chunk_ != chunk) {
      raise("ZeRO: begin_update({}) before owned_grads({})", chunk, chunk);
    }
    off = chunk * chunk_elems();
    n = grads32_.numel();
  }
  float* all = mixed_ ? grads32_.f32() : grads_.f32();
  float* g = cfg_.stage == 1 && !mixed_ ? all + lo_ : all;
  if (cfg_.offload_optimizer) {
    ops::to_host(host_grads_.f32() + off, g, n * sizeof(float));
    grads32_.release();  // the device's fp32 copy is no longer needed
    float* p = host_master_.f32() + off;
    return {p, host_grads_.f32() + off, at(m_, off), at(v_, off), n, Device::cpu()};
  }
  float* p = cfg_.stage == 0 || partitioned_master() ? master_.f32() : master_.f32() + lo_;
  return {p + off, g, at(m_, off), at(v_, off), n, dev_.device()};
}

void ZeroEngine::finish_update() {
  const size_t n = cfg_.stage == 0 ? total_ : hi_ - lo_;
  if (cfg_.offload_optimizer && master_.defined()) {
    // fp32: the device's weights take the host's update.
    float* p = partitioned_master() ? master_.f32() : master_.f32() + lo_;
    ops::from_host(p, host_master_.f32(), n * sizeof(float));
  }
  if ((cfg_.stage == 1 || cfg_.stage == 2) && !partitioned_master() && dp_ > 1) {
    // fp32: each rank updated its slice of the weights; gather the others' back.
    all_gather_partitions(master_.f32() + part_ * udp_rank(), master_.f32(), DType::kF32);
  }
  end_step();
  publish_master();  // fp16/bf16: the 16-bit weights (stages 1-2 all-gathered)
  drop_gathered();
}

void ZeroEngine::end_step() {
  grads32_.release();
}

std::vector<float> ZeroEngine::full_parameters() const {
  std::vector<float> full(total_);
  if (partitioned_master()) {
    Tensor gathered =
        Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32, "buffer.full", staging_);
    Tensor staged;  // the host's master partition (fp16/bf16 with offload), on the device
    const float* mine = master_.defined() ? master_.f32() : nullptr;
    if (!mine) {
      staged = Tensor::zeros({static_cast<int64_t>(part_)}, DType::kF32, "buffer.master", staging_);
      ops::from_host(staged.f32(), host_master_.f32(), part_ * sizeof(float));
      mine = staged.f32();
    }
    topo_.dp->all_gather(device_buffer(const_cast<float*>(mine), part_, DType::kF32),
                         device_buffer(gathered.f32(), padded_, DType::kF32));
    ops::to_host(full.data(), gathered.f32(), total_ * sizeof(float));
  } else {
    ops::to_host(full.data(), master_.f32(), total_ * sizeof(float));
  }
  return full;
}

void ZeroEngine::set_full_parameters(const std::vector<float>& full, int src) {
  std::vector<float> got(padded_, 0.0f);
  std::copy(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(total_), got.begin());
  if (src >= 0 && dp_ > 1) {
    Tensor staged =
        Tensor::zeros({static_cast<int64_t>(padded_)}, DType::kF32, "buffer.full", staging_);
    ops::from_host(staged.f32(), got.data(), padded_ * sizeof(float));
    topo_.dp->broadcast(device_buffer(staged.f32(), padded_, DType::kF32), src);
    ops::to_host(got.data(), staged.f32(), padded_ * sizeof(float));
  }
  const float* mine = got.data() + (partitioned_master() ? lo_ : 0);
  const size_t n = params_master_count();
  if (master_.defined()) {
    ops::from_host(master_.f32(), mine, n * sizeof(float));
  } else {
    std::copy(mine, mine + n, host_master_.f32());
  }
  restored();
}

}  // namespace fl::parallel
