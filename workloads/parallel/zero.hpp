// ZeRO (Rajbhandari et al., as DeepSpeed implements it) for the trainer: who holds which part of
// the parameters, gradients and optimizer state, and the collectives that move them.
//
//   stage 0: every data-parallel rank holds everything; gradients are all-reduced bucket by bucket.
//   stage 1: the optimizer state (Adam moments, and the fp32 master weights under fp16/bf16) is
//            partitioned; each rank updates its partition and the updated parameters are
//            all-gathered back in allgather buckets.
//   stage 2: gradients too: as the backward produces a bucket of gradients it is reduced and the
//            rank keeps only the slice in its partition; no full-size gradient buffer exists.
//   stage 3: parameters too: each group (embedding, block, head) is gathered just before its
//            forward and again before its backward, and freed after (with prefetch of the next
//            group and a cap on the gathered bytes kept resident).
//
// Partitions are contiguous ranges of the flat parameter vector: rank r owns
// [r·part, (r+1)·part), part = ceil(total / dp). Optimizer offload keeps the fp32 master weights
// and the moments of the partition on the host, charged to the host accountant.
//
// Under fp16/bf16 the parameters and gradients are stored in that format (2 bytes each; the fp32
// master weights belong to the optimizer state), so the model states follow ZeRO's
// mixed-precision formulas (2+2+K)Ψ, (2+2)Ψ + KΨ/Nd, 2Ψ + (2+K)Ψ/Nd and (2+2+K)Ψ/Nd, and the
// gradient buckets of stages 2-3 are 16-bit too. The CPU kernels read and accumulate fp32: the
// model decodes one op's parameters at a time (acquire_stored, stored) into fp32 scratch and
// accumulates one op's gradients at a time in fp32 scratch encoded back (grads_stored); acquire()
// and grads() still decode a whole group (buffer.params_f32, buffer.grads_f32) for callers that
// want fp32 groups. The optimizer reads an fp32 copy of the gradients it updates one reduce
// bucket at a time (buffer.grads_f32: of all of them at stage 0, of the partition from stage 1
// on); initial weights are built in fp32 one allgather bucket at a time. These are transient
// buffers, not model states; the values are the 16-bit ones, so the arithmetic is that of fp32
// math on rounded operands. With offload the fp32 master weights exist only on the host.
//
// Allocation names carry the memory categories (kernels/memory.hpp): params.*, grads.*,
// optimizer.*, gather.* and buffer.*.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor.hpp"
#include "workloads/model/gpt.hpp"
#include "workloads/parallel/nvme_swap.hpp"
#include "workloads/parallel/topology.hpp"

namespace fl::parallel {

struct ZeroConfig {
  int stage = 0;
  DType precision = DType::kF32;
  // Gradient bucket in bytes: whole groups, a new bucket when the next group would not fit
  // (a group larger than the bucket is a bucket of its own). 0: 1 MiB or the model if smaller.
  size_t reduce_bucket_bytes = 0;
  // Stages 1-2: bytes all-gathered per round when the updated partitions are put back together
  // (dp pieces of allgather_bucket_bytes / dp). 0: 1 MiB or the model if smaller.
  size_t allgather_bucket_bytes = 0;
  // Stage 3: groups gathered ahead of their use, up to this many bytes (0: no prefetch);
  // -1: unset (262144 parameters: 1 MiB in fp32, 512 KiB in fp16/bf16).
  int64_t prefetch_bytes = -1;
  // Stage 3: gathered groups stay resident after their use while the gathered total is at most
  // this (0: every group is freed right after its forward or backward); -1: unset (0).
  int64_t max_live_bytes = -1;
  // Stage 3: build each rank's partition directly (deepspeed.zero.Init); false materialises the
  // whole model on every rank first.
  bool zero_init = true;
  // Master weights and moments of the rank's partition live on the host (stage >= 1).
  bool offload_optimizer = false;
  // Stage 3 under fp16/bf16: the 16-bit partition lives in NVMe swap files (offload_param with
  // device nvme; nvme_swap.hpp), written after each update and read back at each gather.
  bool offload_param_nvme = false;
  NvmeConfig nvme;
  // Optimizer state per parameter (K in ZeRO's formulas): 8 = two fp32 tensors (AdamW's m and
  // v), 4 = one (SGD's momentum buffer, named `state_name`), 0 = none (plain SGD).
  int optimizer_state_bytes = 8;
  std::string state_name = "optimizer.exp_avg";
  uint64_t seed = 0;
  bool broadcast_init = false;
  // Stage 0 as torch's DistributedDataParallel: its reducer counts a parameter's gradient as
  // ready when the backward produced it and all-reduces only buckets whose parameters are all
  // ready; a step that leaves some never ready is an unfinished reduction, refused when the next
  // step starts. find_unused_parameters marks the ones the backward never reached as ready.
  bool ddp_reducer = false;
  bool find_unused_parameters = false;
  // Colossal-AI's GeminiDDP (GeminiPlugin with shard_param_frac 0.0, which keeps ZeRO-2's
  // layout): the gradient buckets are its chunks. A chunk is reduced when every group in it has
  // produced its gradient in the step (its tensors all READY_FOR_REDUCE), not when the bucket's
  // last group fires; after the backward a chunk the forward used that is still unreduced is
  // GeminiDDP's post-backward error, naming the parameters whose gradient never came, and a
  // group whose gradient comes twice is its gradient hook's. Stage 2 only.
  bool gemini = false;
  // Frozen parameters (workload.freeze): flat [lo, hi) ranges, sorted, whose gradients are zeroed
  // as each group's backward ends (requires_grad False: torch computes none).
  std::vector<std::pair<size_t, size_t>> frozen;
};

// Checks a configuration against the model size; ConfigError naming the option and what is
// allowed.
void validate(const ZeroConfig& z, size_t total_params, int dp);

// Elements [lo, hi) of the flat vector and where element lo lives.
struct FlatSpan {
  float* data = nullptr;
  size_t lo = 0, hi = 0;
  size_t size() const { return hi - lo; }
};

class ZeroEngine final : public model::ParamAccess {
 public:
  // `staging`: accountant of communication staging outside the budget (as the trainer's).
  ZeroEngine(ZeroConfig cfg, const model::ParamLayout& layout, Topology& topo,
             MemoryAccountant& device, MemoryAccountant& host, MemoryAccountant& staging);

  // ParamAccess: what the model's forward and backward read and write.
  const float* acquire(int g, bool backward) override;
  void release(int g, bool backward) override;
  float* grads(int g) override;
  void grads_done(int g) override;
  DType stored() const override { return store(); }
  const void* acquire_stored(int g, bool backward) override;
  void* grads_stored(int g) override;

  // Before a step's first micro-batch: gradients to zero. `last` marks the step's last backward.
  void begin_step();
  // Brackets one backward pass (torch's one `loss.backward()`). Inside, stages 2-3 count each
  // group's grads_done as DeepSpeed's gradient hook firing: a group whose hook fires a second time
  // in one pass (a weight used in two checkpointed segments, each recomputed and differentiated
  // in its own autograd pass) is refused with DeepSpeed's assertion, as stage_1_and_2.py's
  // params_already_reduced does; stage 0-1 reduce after the backward and count nothing.
  void begin_backward();
  void end_backward() { in_backward_ = false; }
  // After every micro-batch's backward: stage 0/1 all-reduce the full gradients bucket by bucket
  // (stage 2/3 reduced them during the backward).
  void finish_gradients();
  // Stages 0-1: the bucketed all-reduce (average) of the full gradients finish_gradients makes,
  // now (a no-op at stage 2-3 or dp 1; refused under the DDP reducer, which decides itself).
  void all_reduce_gradients();
  // Stages 0-1, after finish_gradients: sums the gradients of elements [lo, lo + n) over `group`
  // in their stored format (Megatron's all-reduce of the tied word embeddings' gradients over
  // the embedding group). A rank of the group that holds no such elements passes
  // lo == kNoElements and joins with n zeros.
  static constexpr size_t kNoElements = static_cast<size_t>(-1);
  void sum_grads_over(comm::Communicator& group, size_t lo, size_t n);
  // After a step: ZeRO-3 drops every gathered group (the parameters changed).
  void drop_gathered();

  // The gradients this rank judges (overflow, norm): all of them at stage 0 and fp32 stage 1,
  // else its partition (fp16/bf16 stage 1 too, as DeepSpeed's stage 1 converts only its share),
  // in owned_chunks() pieces. fp32: one chunk, the gradients themselves. fp16/bf16: chunks of
  // the reduce bucket's element count, each an fp32 copy of the 16-bit gradients converted when
  // asked for (so no fp32 copy of all of them is ever held), living until the next chunk is
  // asked for, begin_update() (with offload) or end_step().
  size_t owned_chunks() const;
  FlatSpan owned_grads(size_t chunk = 0);
  // Whether owned_grads() is every gradient (the same on every data-parallel replica) rather than
  // this rank's partition.
  bool judges_all_grads() const;
  // The optimizer's view: parameters, gradients and moments of the elements this rank updates.
  struct Update {
    float *params, *grads, *m, *v;
    size_t n;
    Device device;     // where the update runs (the host under offload)
    size_t first = 0;  // the flat index of element 0 (of params, grads, m and v)
  };
  // Prepares the update of a chunk, after owned_grads(chunk) (offload: its gradients copied to
  // the host). Call finish_update after the last chunk's.
  Update begin_update(size_t chunk = 0);
  // Publishes the updated parameters: offload copies them to the device, stages 1-2 all-gather
  // them, and the compute copy is refreshed.
  void finish_update();
  // After a step, applied or skipped: frees the fp32 copy of the gradients (fp16/bf16).
  void end_step();

  // The rank's fp32 parameter vector (collective under stage 3).
  std::vector<float> full_parameters() const;
  // Stage 3: the full parameters gathered one group at a time into the device's gather.* memory
  // (DeepSpeed's _zero3_consolidated_16bit_state_dict: each module inside its own
  // GatheredParameters, its values copied away to the host), collective over the data-parallel
  // group. The values are the stored ones (16-bit under fp16/bf16) in fp32. `release_on_exit`:
  // each group is re-partitioned as its context exits (DeepSpeed PR 1223); false: a group stays
  // gathered until its next use releases it (GatheredParameters with modifier_rank=None before
  // that PR), so the whole model is resident at the end.
  std::vector<float> consolidate_by_group(bool release_on_exit);
  // The inverse (the exit of deepspeed.zero.GatheredParameters): `full` (total() elements) is
  // broadcast over the data-parallel group from dp rank `src` and every rank keeps its partition
  // of it (or all of it when its master weights are whole); src < 0 keeps each rank's own `full`
  // without a collective. Collective when src >= 0.
  void set_full_parameters(const std::vector<float>& full, int src);
  // Checkpointed state: parameters (full, or the partition under stage 3) and moments.
  // With offload under fp16/bf16 they live on the host only.
  Tensor& params_master() { return master_.defined() ? master_ : host_master_; }
  size_t params_master_count() const { return partitioned_master() ? part_ : padded_; }
  // The fp32 master weights are the rank's partition: stage 3, and stages 1-2 under fp16/bf16
  // (where the forward reads a rounded copy and ZeRO-1 partitions the master weights).
  bool partitioned_master() const { return cfg_.stage == 3 || (mixed_ && cfg_.stage >= 1); }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  // After a checkpoint restored params_master() and the moments.
  void restored();

  size_t total() const { return total_; }
  size_t part() const { return part_; }
  // The transients DeepSpeed's memory estimates count beyond the model states, in bytes of the
  // stored format: the largest gradient bucket (stages 2-3: whole groups, so at least the largest
  // group), and the largest group ZeRO-3 gathers at once (its largest_layer_memory's gathered
  // parameters). 0 where the stage has none.
  size_t largest_bucket_bytes() const;
  size_t largest_gather_bytes() const;
  size_t lo() const { return lo_; }
  size_t hi() const { return hi_; }

 private:
  struct Bucket {
    int first = 0, last = 0;  // group indices, first > last (backward order), flat [lo, hi)
    size_t lo = 0, hi = 0;
  };
  // Construction, in this order: the fp32 master weights (and the 16-bit ones the forward reads)
  // from the seed, broadcast from dp rank 0 under broadcast_init; the gradients and the
  // optimizer state (on the host under offload, with a host copy of the fp32 weights); the
  // gradient buckets (whole groups in backward order).
  void init_weights();
  // The seeded initial values of flat elements [lo, hi) into dst (memory on `where`).
  void fill_range(float* dst, size_t lo, size_t hi, Device where) const;
  // The initial fp32 weights built one allgather bucket at a time (buffer.init_weights, never
  // the whole model in fp32), each chunk broadcast from dp rank 0 when `broadcast`, then handed
  // to take(chunk, first element, count).
  void build_in_chunks(bool broadcast,
                       const std::function<void(const float*, size_t, size_t)>& take);
  // A chunk of the initial weights: encoded into `whole` (16-bit, unless nullptr) and its part
  // in this rank's partition copied into the master weights (on the host when host_master).
  void take_chunk(const float* chunk, size_t off, size_t n, void* whole, Tensor& master,
                  bool host_master) const;
  void alloc_grads_and_optimizer_state();
  void plan_grad_buckets();
  // fp16/bf16 with offload: the fp32 master weights exist only on the host (host_master_).
  bool master_on_host() const { return mixed_ && cfg_.offload_optimizer; }
  void gather(int g);
  void prefetch_after(int g, bool backward);
  // Reduces bucket b's gradients (`data`, in the stored format) and adds this rank's slice of them
  // to its gradient partition.
  void reduce_bucket(const Bucket& b, void* data);
  // fp16/bf16: the fp32 master weights (device, or host under offload) encoded into the 16-bit
  // parameters the forward reads (stages 1-2: the rank's slice, then all-gathered).
  void publish_master();
  // Every rank's partition (`mine`, part elements of type t) into `full` (padded elements),
  // collective.
  void all_gather_partitions(const void* mine, void* full, DType t);
  // The fp32 values of group g's 16-bit parameters (stages 0-2: from the compute copy; stage 3:
  // from its gather), valid until release(g).
  const float* decoded(int g, const void* src16);
  size_t udp_rank() const { return static_cast<size_t>(dp_rank_); }
  void all_reduce_avg(float* data, size_t n);
  Tensor alloc(size_t n, const char* what, MemoryAccountant& where, DType t = DType::kF32) const;
  // Element type of the stored parameters and gradients: fp32, or the 16-bit precision.
  DType store() const { return mixed_ ? cfg_.precision : DType::kF32; }
  size_t store_bytes() const { return dtype_size(store()); }
  size_t gathered_bytes() const;
  // fp16/bf16: elements of an owned_grads chunk.
  size_t chunk_elems() const;

  ZeroConfig cfg_;
  const model::ParamLayout& layout_;
  Topology& topo_;
  MemoryAccountant &dev_, &host_, &staging_;
  size_t total_ = 0, part_ = 0, padded_ = 0, lo_ = 0, hi_ = 0;
  int dp_ = 1, dp_rank_ = 0;
  bool mixed_ = false;
  Tensor master_;   // fp32 weights: full, or the partition (partitioned_master()), on the device
                    // (none under fp16/bf16 with offload: host_master_ is the master)
  Tensor compute_;  // stages 0-2 in fp16/bf16: the whole parameters, 16-bit
  Tensor part16_;   // stage 3 in fp16/bf16: the rank's partition, 16-bit (none under NVMe
                    // parameter offload: swapper_ holds it in files)
  std::unique_ptr<NvmeParamSwapper> swapper_;
  Tensor grads_;    // full (stages 0-1) or the partition (stages 2-3); 16-bit in fp16/bf16
  Tensor grads32_;  // fp16/bf16: fp32 copy of a chunk of the owned gradients for the step
  size_t grads32_chunk_ = 0;  // the chunk grads32_ holds
  Tensor m_, v_;              // moments: full (stage 0) or the partition; on the host with offload
  Tensor host_master_, host_grads_;   // offload: the partition's fp32 master weights, gradients
  std::map<int, Tensor> params32_;    // fp16/bf16: decoded values of the acquired groups
  std::map<int, Tensor> grads32_of_;  // fp16/bf16: fp32 gradients of a group, from grads()
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;     // group -> bucket
  std::map<int, Tensor> live_;     // stage 3: gathered groups
  std::map<int, Tensor> pending_;  // stage 2/3: bucket index -> its gradients (stored format)
  std::vector<char> ready_;        // ddp_reducer: group -> its gradients were produced this step
  std::vector<char> fired_;        // stage 2-3, in a backward pass: group -> its hook fired
  std::vector<int> unfinished_;    // ddp_reducer: the groups the prior step left unready
  std::vector<char> accessed_;     // gemini: bucket (chunk) -> a group of it was used this step
  std::vector<int> chunk_ready_;   // gemini: bucket -> groups whose gradient came this step
  std::vector<char> reduced_;      // gemini: group -> its gradient came (_gemini_reduced)
  // gemini: chunks whose reduction the hooks launched, in launch order. The collectives run
  // after the post-backward check: the hooks enqueue them on the communication stream and the
  // host goes on without waiting, so a rank whose chunk is left unreduced reaches the check (and
  // raises) even when a peer has launched a reduction it will never join.
  std::vector<int> launched_;
  bool in_backward_ = false;  // between begin_backward and end_backward
  // The stage 0-1 bucketed all-reduce of the full gradients (finish_gradients and
  // all_reduce_gradients).
  void all_reduce_buckets();
  // ddp_reducer: the reducer's end of a step (finish_gradients); false when some group is unready.
  bool ddp_ready_to_reduce();
  [[noreturn]] void raise_unfinished_reduction();
  // gemini: the step's chunk bookkeeping cleared (begin_step, and after the check).
  void reset_chunks();
  // gemini: GeminiDDP's _post_backward, after the step's backward.
  void check_chunks_reduced();
  // gemini: group g's gradient came; true when that completes its chunk (time to reduce it).
  bool chunk_completed_by(int g);
  // Reduces stage 2's pending bucket (chunk) b and drops it.
  void reduce_pending(int b);
  // The names of the parameters in group g.
  std::vector<std::string> names_in(int g) const;
  // Zeroes the stored gradients of group g's frozen elements.
  void zero_frozen_grads(int g);
};

}  // namespace fl::parallel
