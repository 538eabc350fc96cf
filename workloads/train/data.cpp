#include "workloads/train/data.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "base/counter_rng.hpp"
#include "base/error.hpp"
#include "injector/site.hpp"

namespace fl::train {

namespace {
using rng::mix;
// Successor k (0, 1, 2) of token a, with probabilities 0.7, 0.2, 0.1.
constexpr double kProbs[3] = {0.7, 0.2, 0.1};
int successor(int a, int k, int vocab) {
  return (a * 7 + 3 + k * 5) % vocab;
}
}  // namespace

SyntheticCorpus::SyntheticCorpus(int vocab, int seq_len, int64_t num_samples, uint64_t seed)
    : vocab_(vocab), seq_len_(seq_len), num_samples_(num_samples), seed_(seed) {
  if (vocab < 8) raise("synthetic corpus needs a vocabulary of at least 8 tokens, got {}", vocab);
  if (num_samples <= 0) raise("synthetic corpus needs at least one sample, got {}", num_samples);
}

void SyntheticCorpus::sample(int64_t index, int32_t* inputs, int32_t* targets) const {
  if (index < 0 || index >= num_samples_) {
    raise("sample index {} is outside the dataset (size {})", index, num_samples_);
  }
  uint64_t state = mix(seed_ ^ mix(static_cast<uint64_t>(index)));
  int tok = static_cast<int>(state % static_cast<uint64_t>(vocab_));
  for (int t = 0; t <= seq_len_; ++t) {
    if (t < seq_len_) inputs[t] = tok;
    if (t > 0) targets[t - 1] = tok;
    state = mix(state);
    double u = rng::to_unit(state);
    int k = u < kProbs[0] ? 0 : u < kProbs[0] + kProbs[1] ? 1 : 2;
    tok = successor(tok, k, vocab_);
  }
}

double SyntheticCorpus::entropy() const {
  double h = 0;
  for (double p : kProbs) h -= p * std::log(p);
  return h;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, bool drop_last, uint64_t seed)
    : size_(dataset_size),
      replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed) {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    raise("sampler: rank {} is out of range for {} replicas", rank, num_replicas);
  }
}

int64_t DistributedSampler::samples_per_epoch() const {
  const int64_t usable = drop_last_ ? size_ - size_ % replicas_ : size_;
  // indices[rank::replicas] of the first `usable` indices
  return usable / replicas_ + (rank_ < usable % replicas_ ? 1 : 0);
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all(static_cast<size_t>(size_));
  std::iota(all.begin(), all.end(), 0);
  if (shuffle_) {
    std::mt19937_64 rng(mix(seed_ + static_cast<uint64_t>(epoch)));
    std::shuffle(all.begin(), all.end(), rng);
  }
  const int64_t usable = drop_last_ ? size_ - size_ % replicas_ : size_;
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < usable; i += replicas_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

int64_t DistributedSampler::num_batches(int batch) const {
  const int64_t n = samples_per_epoch();
  return drop_last_ ? n / batch : (n + batch - 1) / batch;
}

}  // namespace fl::train
