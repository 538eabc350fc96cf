// ZeroEngine during a training step (zero.hpp has the design): the parameter groups gathered for
// the forward and backward (stage 3, with prefetch and the cap on what stays gathered), the
// gradients reduced bucket by bucket into the rank's partition or all-reduced whole (stages 0-1),
// and the optimizer's update of the rank's part, chunk by chunk. Construction, initial weights
// and the whole-model views are in zero.cpp.
#include "workloads/parallel/zero.hpp"

#include <algorithm>
#include <utility>

#include <fmt/ranges.h>

#include "base/error.hpp"
#include "kernels/ops.hpp"
#include "workloads/comm/communicator.hpp"

namespace fl::parallel {

namespace {
using comm::device_buffer;
}  // namespace

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
    if (r == dp_rank_ && swapper_) {
      swapper_->swap_in(rlo, rhi, dst, g);  // the partition's pieces from their swap files
    } else if (r == dp_rank_) {
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
    const model::ParamGroup& grp = layout_.groups()[static_cast<size_t>(h)];
    const size_t bytes = grp.numel() * store_bytes();
    if (live_.count(h)) continue;
    if (bytes > budget) break;
    // NVMe: DeepSpeed's prefetch takes only the swap buffers that are free. A gather is a
    // collective here (DeepSpeed's swap-in is local I/O), so the ranks decide together: every
    // rank prefetches the group only if every rank has the buffers for its pieces of it.
    if (swapper_) {
      float ok = swapper_->buffers_for(std::max(grp.lo, lo_), std::min(grp.hi, hi_)) <=
                         swapper_->available_buffers()
                     ? 1.0f
                     : 0.0f;
      if (dp_ > 1)
        topo_.dp->all_reduce(comm::host_buffer(&ok, 1, DType::kF32), comm::ReduceOp::kMin);
      if (ok < 0.5f) break;
    }
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
  // GeminiDDP's pre-forward op hook accesses the parameter's chunk.
  if (cfg_.gemini && !backward)
    accessed_[static_cast<size_t>(bucket_of_[static_cast<size_t>(g)])] = 1;
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
  if (swapper_) swapper_->release(g);
}

void ZeroEngine::drop_gathered() {
  if (swapper_) {
    for (const auto& [g, t] : live_) swapper_->release(g);
  }
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

void ZeroEngine::begin_backward() {
  in_backward_ = true;
  fired_.assign(layout_.groups().size(), 0);
}

void ZeroEngine::grads_done(int g) {
  if (cfg_.ddp_reducer && static_cast<size_t>(g) < ready_.size())
    ready_[static_cast<size_t>(g)] = 1;
  if (!cfg_.gemini && cfg_.stage >= 2 && in_backward_ && static_cast<size_t>(g) < fired_.size()) {
    if (fired_[static_cast<size_t>(g)]) {
      // DeepSpeed's reduce hook copies a parameter's gradient into the bucket once per backward
      // and marks it reduced; a second firing would overwrite or double its slice.
      raise(
          "AssertionError: The parameter {} has already been reduced. Gradient computed twice for "
          "this partition. Multiple gradient reduction is currently not supported (ZeRO stage {}: "
          "parameter group {}'s gradient hook fired twice in one backward, as it does for a "
          "weight used in two checkpointed segments)",
          g, cfg_.stage, g);
    }
    fired_[static_cast<size_t>(g)] = 1;
  }
  auto it = grads32_of_.find(g);
  if (it != grads32_of_.end()) {
    // The backward rounded them to the precision: storing them in 16 bits loses nothing.
    ops::encode(it->second.f32(), grads_stored(g), cfg_.precision, it->second.numel());
    grads32_of_.erase(it);
  }
  if (!cfg_.frozen.empty()) zero_frozen_grads(g);
  if (cfg_.stage < 2) return;
  const int b = bucket_of_[static_cast<size_t>(g)];
  const Bucket& bk = buckets_[static_cast<size_t>(b)];
  if (cfg_.gemini ? !chunk_completed_by(g) : g != bk.last) return;
  if (cfg_.gemini) {
    launched_.push_back(b);
    return;
  }
  reduce_pending(b);
}

void ZeroEngine::reduce_pending(int b) {
  auto pit = pending_.find(b);
  if (pit == pending_.end()) raise("ZeRO: bucket {} completed without gradients", b);
  reduce_bucket(buckets_[static_cast<size_t>(b)], pit->second.raw());
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
  // DDP's prepare_for_forward: a reduction the prior step left unfinished is refused here.
  if (!unfinished_.empty()) raise_unfinished_reduction();
  if (cfg_.ddp_reducer) ready_.assign(layout_.groups().size(), 0);
  if (cfg_.gemini) reset_chunks();
  ops::zero(grads_.raw(), grads_.bytes());
  pending_.clear();
  launched_.clear();
  grads32_of_.clear();
  grads32_.release();
}

void ZeroEngine::finish_gradients() {
  if (cfg_.gemini) {
    check_chunks_reduced();
    for (const int b : std::exchange(launched_, {})) reduce_pending(b);
  }
  if (!pending_.empty()) raise("ZeRO: {} gradient bucket(s) never completed", pending_.size());
  // Torch's reducer checks readiness at any world size, one rank included.
  if (cfg_.ddp_reducer && !ddp_ready_to_reduce()) return;
  all_reduce_buckets();
}

void ZeroEngine::all_reduce_gradients() {
  // DDP's reducer decides itself when a bucket is ready (finish_gradients); an extra round would
  // bypass its readiness check.
  if (cfg_.ddp_reducer) raise("ZeRO: all_reduce_gradients under the DDP reducer");
  all_reduce_buckets();
}

void ZeroEngine::all_reduce_buckets() {
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

bool ZeroEngine::ddp_ready_to_reduce() {
  if (ready_.size() != layout_.groups().size()) ready_.assign(layout_.groups().size(), 0);
  for (size_t g = 0; g < ready_.size(); ++g) {
    if (ready_[g]) continue;
    // find_unused_parameters: the reducer found it unreachable from the outputs and marked it
    // ready itself, with a zero gradient (what grads_ holds for it).
    if (!cfg_.find_unused_parameters) unfinished_.push_back(static_cast<int>(g));
  }
  // DDP launches its buckets in order and stops at the first one holding an unready parameter;
  // here a rank with one launches none: its replicas that were ready wait in their all-reduce
  // for it, and it fails when its next step starts.
  return unfinished_.empty();
}

void ZeroEngine::zero_frozen_grads(int g) {
  const model::ParamGroup& grp = layout_.groups()[static_cast<size_t>(g)];
  char* stored = static_cast<char*>(grads_stored(g));
  const size_t es = store_bytes();
  for (const auto& [lo, hi] : cfg_.frozen) {
    const size_t a = std::max(lo, grp.lo), b = std::min(hi, grp.hi);
    if (a < b) ops::zero(stored + (a - grp.lo) * es, (b - a) * es);  // 0 is all-zero bits
  }
}

std::vector<std::string> ZeroEngine::names_in(int g) const {
  const auto& grp = layout_.groups()[static_cast<size_t>(g)];
  std::vector<std::string> names;
  for (const auto& sp : layout_.specs()) {
    if (sp.offset >= grp.lo && sp.offset < grp.hi) names.push_back(sp.name);
  }
  return names;
}

void ZeroEngine::reset_chunks() {
  accessed_.assign(buckets_.size(), 0);
  chunk_ready_.assign(buckets_.size(), 0);
  reduced_.assign(layout_.groups().size(), 0);
}

bool ZeroEngine::chunk_completed_by(int g) {
  const auto u = static_cast<size_t>(g);
  if (reduced_[u]) {
    // grad_handle finds the tensor no longer HOLD_AFTER_BWD: its chunk slice was filled already.
    raise(
        "RuntimeError: Parameter `{}` failed at the gradient reduction. Some unsupported torch "
        "function is operated upon this parameter. (GeminiDDP: parameter group {}'s gradient "
        "came twice in one step)",
        names_in(g).empty() ? std::to_string(g) : names_in(g).front(), g);
  }
  reduced_[u] = 1;
  const auto b = static_cast<size_t>(bucket_of_[u]);
  const Bucket& bk = buckets_[b];
  if (++chunk_ready_[b] < bk.first - bk.last + 1) return false;
  accessed_[b] = 0;  // reduced, then released: no longer accessed memory
  return true;
}

void ZeroEngine::check_chunks_reduced() {
  const bool held = std::find(accessed_.begin(), accessed_.end(), 1) != accessed_.end();
  std::vector<std::string> names;
  for (size_t g = 0; held && g < reduced_.size(); ++g) {
    if (reduced_[g]) continue;
    for (auto& n : names_in(static_cast<int>(g))) names.push_back(std::move(n));
  }
  reset_chunks();
  if (!held) return;
  // GeminiDDP raises RuntimeError with three strings: Python prints the tuple, its newlines and
  // tabs escaped.
  raise(
      "RuntimeError: (\"ZERO DDP error: the synchronization of gradients doesn't exit "
      "properly.\", 'The most possible reason is that the model is not compatible with "
      "GeminiDDP.\\n', 'Reduction failed at followed parameters:\\n\\t{}') (rank {} of group "
      "'{}': a chunk the forward used still holds parameters whose gradient never came)",
      fmt::join(names, "\\n\\t"), dp_rank_, topo_.dp->group());
}

void ZeroEngine::raise_unfinished_reduction() {
  // Refused once: a caller that goes on after the error starts from a clean reducer.
  const std::vector<int> unready = std::exchange(unfinished_, {});
  std::vector<std::string> names;
  for (int g : unready) {
    for (auto& n : names_in(g)) names.push_back(std::move(n));
  }
  raise(
      "Expected to have finished reduction in the prior iteration before starting a new one: "
      "the DistributedDataParallel module's parameters in {} group(s) got no gradient in the "
      "prior step on rank {} of group '{}', so their buckets were never reduced (pass "
      "find_unused_parameters=True, or make every forward output take part in the loss). "
      "Parameters which did not receive grad: {}",
      unready.size(), dp_rank_, topo_.dp->group(), fmt::join(names, ", "));
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
    return {p, host_grads_.f32() + off, at(m_, off), at(v_, off), n, Device::cpu(), lo_ + off};
  }
  float* p = cfg_.stage == 0 || partitioned_master() ? master_.f32() : master_.f32() + lo_;
  return {
      p + off, g, at(m_, off), at(v_, off), n, dev_.device(), (cfg_.stage == 0 ? 0 : lo_) + off};
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

}  // namespace fl::parallel
