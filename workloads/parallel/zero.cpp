// ZeroEngine set up and seen whole (zero.hpp has the design): the configuration's checks, who
// owns which partition, the initial weights built in pieces, the gradient buckets planned, the
// 16-bit weights published from the master copy, and the full parameters gathered or set (a
// checkpoint's restore). What happens during a step is in zero_step.cpp.
#include "workloads/parallel/zero.hpp"

#include <algorithm>
#include <functional>

#include "base/dtype.hpp"
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
  if (z.find_unused_parameters && !z.ddp_reducer) {
    raise<ConfigError>(
        "workload.ddp.find_unused_parameters (--find-unused-parameters) is a "
        "DistributedDataParallel argument, but workload.ddp.wrapper (--ddp) is false (allowed: "
        "with wrapper true)");
  }
  if (z.offload_param_nvme && (z.stage != 3 || z.precision == DType::kF32)) {
    raise<ConfigError>(
        "workload.zero.offload_param (--offload-param) nvme swaps the 16-bit partition of ZeRO "
        "stage 3 (allowed: zero 3 with precision fp16 or bf16; this job: zero {}, {})",
        z.stage, dtype_name(z.precision));
  }
  if (z.offload_param_nvme &&
      (z.nvme.path.empty() || z.nvme.aio.block_size == 0 || z.nvme.aio.intra_op < 1)) {
    raise<ConfigError>(
        "workload.zero.nvme_path must name a folder and workload.zero.aio's block_size and "
        "thread_count must be at least 1");
  }
  if (z.gemini && z.stage != 2) {
    raise<ConfigError>(
        "workload.zero.reducer (--zero-reducer) gemini stands for Colossal-AI's GeminiPlugin with "
        "shard_param_frac 0.0, whose chunks keep ZeRO-2's layout, but --zero is {} (allowed: "
        "zero 2)",
        z.stage);
  }
  if (z.ddp_reducer && z.stage != 0) {
    raise<ConfigError>(
        "workload.ddp.wrapper (--ddp) wraps the model in DistributedDataParallel, whose reducer "
        "all-reduces whole gradients, but --zero is {} (allowed: zero 0)",
        z.stage);
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
  if (cfg_.gemini) reset_chunks();
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
    if (mixed_ && cfg_.offload_param_nvme) {
      NvmeConfig nvme = cfg_.nvme;
      nvme.rank = topo_.rank;
      swapper_ = std::make_unique<NvmeParamSwapper>(nvme, layout_, lo_, hi_, cfg_.precision);
    } else if (mixed_) {
      part16_ = alloc(part_, "params.partition", dev_, cfg_.precision);
    }
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
  // NVMe parameter offload: encoded into a transient buffer and written to the swap files.
  Tensor swap_out;
  if (swapper_) swap_out = alloc(part_, "buffer.swap_out", dev_, cfg_.precision);
  void* dst = swapper_          ? swap_out.raw()
              : cfg_.stage == 3 ? part16_.raw()
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
  if (swapper_) swapper_->swap_out(dst);
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

std::vector<float> ZeroEngine::consolidate_by_group(bool release_on_exit) {
  if (cfg_.stage != 3)
    raise<ConfigError>("consolidate_by_group is ZeRO-3's (stage {})", cfg_.stage);
  std::vector<float> full(total_);
  const auto& groups = layout_.groups();
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    const model::ParamGroup& grp = groups[static_cast<size_t>(g)];
    const bool was_live = live_.count(g) != 0;
    if (!was_live) gather(g);
    const Tensor& t = live_.at(g);
    if (mixed_) {  // copied away to the host in the module's dtype, as DeepSpeed's .cpu()
      std::vector<uint16_t> half(grp.numel());
      ops::to_host(half.data(), t.raw(), half.size() * sizeof(uint16_t));
      const bool bf16 = cfg_.precision == DType::kBF16;
      for (size_t i = 0; i < half.size(); ++i) {
        full[grp.lo + i] = bf16 ? bf16_to_float(half[i]) : half_to_float(half[i]);
      }
    } else {
      ops::to_host(full.data() + grp.lo, t.f32(), grp.numel() * sizeof(float));
    }
    if (release_on_exit && !was_live) {
      live_.erase(g);
      if (swapper_) swapper_->release(g);
    }
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
