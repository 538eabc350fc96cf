// The calls a training script makes around the training step, each behind a fault site so a plan
// can make it on the wrong ranks, twice or not at all: the data loader's sample order
// (`data.loader`), the evaluation loop (`eval.loop`), the checkpoint save (`checkpoint.save`) and
// the resume's load (`checkpoint.load`).
// The symptom then comes from the real code path: a save that only some ranks enter waits in its
// all-gather for the others, a shard one sample longer gives its rank an extra step.
#include <algorithm>

#include "injector/site.hpp"
#include "workloads/comm/communicator.hpp"
#include "workloads/train/trainer.hpp"

namespace fl::train {

std::vector<int64_t> Trainer::loader(std::vector<int64_t> idx) const {
  std::vector<int64_t> out;
  out.reserve(idx.size() + 1);
  for (size_t i = 0; i < idx.size(); ++i) {
    // seq: the sample's position in this rank's shard for the epoch.
    const auto v = FAULTLINE_FAULT_POINT(
        "data.loader", (fault::SiteContext{static_cast<int64_t>(i), "", "data.loader", -1, nullptr,
                                           0, DType::kI64, -1}));
    if (v == fault::Verdict::kSkip) continue;  // the sample never reaches the rank
    // reorder: the sample changes places with the next one.
    if (v == fault::Verdict::kDefer && i + 1 < idx.size()) std::swap(idx[i], idx[i + 1]);
    out.push_back(idx[i]);
    if (v == fault::Verdict::kRepeat) out.push_back(idx[i]);  // duplicate: yielded twice
  }
  return out;
}

void Trainer::save_call() {
  const auto v = FAULTLINE_FAULT_POINT(
      "checkpoint.save",
      (fault::SiteContext{step_, "", "checkpoint.save", -1, nullptr, 0, DType::kU8, -1}));
  if (v == fault::Verdict::kSkip) return;  // e.g. `if rank == 0: save_checkpoint(...)`
  const std::string dir = save_checkpoint(cfg_.save_dir);
  if (v == fault::Verdict::kRepeat) save_checkpoint(cfg_.save_dir);
  if (cfg_.model_file != "none") save_model_file(dir);
}

void Trainer::load_call() {
  // A rank that skips it starts from its initial weights.
  fault::set_step(step_);
  const auto v = FAULTLINE_FAULT_POINT(
      "checkpoint.load",
      (fault::SiteContext{-1, "", "checkpoint.load", -1, nullptr, 0, DType::kU8, -1}));
  if (v != fault::Verdict::kSkip) load_checkpoint(cfg_.resume);
  if (v == fault::Verdict::kRepeat) load_checkpoint(cfg_.resume);
}

std::optional<float> Trainer::eval_call() {
  const auto v = FAULTLINE_FAULT_POINT(
      "eval.loop", (fault::SiteContext{step_, "", "eval.loop", -1, nullptr, 0, DType::kF32, -1}));
  if (v == fault::Verdict::kSkip) return std::nullopt;
  auto loss = evaluate();
  if (v == fault::Verdict::kRepeat) loss = evaluate();
  return loss;
}

std::optional<float> Trainer::evaluate() {
  const int64_t mb = cfg_.micro_batch;
  DistributedSampler sampler(eval_corpus_.size(), topo_.layout.dp, topo_.dp_rank, false,
                             cfg_.eval_drop_last, 0);
  const auto idx = sampler.indices(0);
  // One forward per batch and its loss summed over the data-parallel group at once, as
  // evaluation loops that reduce every iteration do: ranks with more batches make all-reduces
  // the others never make. Then the total goes to every stage and tensor rank.
  const bool reports = topo_.last_stage() && topo_.tp_rank == 0;
  float total[2] = {0.0f, 0.0f};  // loss x samples, samples
  for (size_t from = 0; from < idx.size(); from += static_cast<size_t>(mb)) {
    const int count =
        static_cast<int>(std::min<int64_t>(mb, static_cast<int64_t>(idx.size() - from)));
    if (cfg_.eval_drop_last && count < mb) break;
    const float local = forward_backward({load(eval_corpus_, idx, from, count)}, false);
    float part[2] = {reports ? local * static_cast<float>(count) : 0.0f,
                     reports ? static_cast<float>(count) : 0.0f};
    topo_.dp->all_reduce(comm::host_buffer(part, 2, DType::kF32));
    total[0] += part[0];
    total[1] += part[1];
  }
  if (topo_.dp_rank != 0) total[0] = total[1] = 0.0f;  // each group's sum counted once
  topo_.world->all_reduce(comm::host_buffer(total, 2, DType::kF32));
  if (total[1] <= 0) return std::nullopt;
  return total[0] / total[1];
}

int64_t Trainer::planned_steps() const {
  if (cfg_.epochs <= 0) return cfg_.steps;
  const int64_t mb = cfg_.micro_batch, n = sampler_.samples_per_epoch();
  const int64_t usable = cfg_.drop_last ? n / mb * mb : n;
  const int64_t micro_batches = (usable + mb - 1) / mb;
  return cfg_.epochs * ((micro_batches + cfg_.grad_accum - 1) / cfg_.grad_accum);
}

}  // namespace fl::train
