// The MoE router's arithmetic on the host, fp32 as DeepSpeed's gating: softmax, top-k, the
// capacity and its drops, the combine weights, the load-balancing loss and their backward.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "base/error.hpp"
#include "workloads/model/moe.hpp"

namespace fl::model {

int gshard_capacity(int S, int E, int k, float factor, int min_capacity) {
  // torch.ceil((num_tokens / num_experts) * capacity_factor) in fp32; top-2 doubles the factor.
  const float c =
      std::ceil(static_cast<float>(static_cast<double>(S) / E) * (factor * static_cast<float>(k)));
  return std::max(static_cast<int>(c), min_capacity);
}

namespace {

int argmax_except(const float* row, int E, int skip) {
  int best = -1;
  for (int e = 0; e < E; ++e) {
    if (e != skip && (best < 0 || row[e] > row[best])) best = e;  // first of equals, as argmax
  }
  return best;
}

}  // namespace

Routing route(const float* logits, int S, int E, int k, bool gshard) {
  Routing r;
  r.S = S;
  r.E = E;
  r.k = k;
  r.normalized = !gshard || k == 2;
  const auto n = static_cast<size_t>(S) * static_cast<size_t>(E);
  r.probs.resize(n);
  for (int s = 0; s < S; ++s) {
    const float* l = logits + static_cast<size_t>(s) * E;
    float* p = r.probs.data() + static_cast<size_t>(s) * E;
    const float mx = *std::max_element(l, l + E);
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (int e = 0; e < E; ++e) p[e] /= sum;
  }
  const auto slots = static_cast<size_t>(S) * static_cast<size_t>(k);
  r.expert.assign(slots, -1);
  r.location.assign(slots, -1);
  r.weight.assign(slots, 0.0f);
  r.counts.assign(static_cast<size_t>(E), 0);
  r.top1_frac.assign(static_cast<size_t>(E), 0.0f);
  for (int s = 0; s < S; ++s) {
    const float* p = r.probs.data() + static_cast<size_t>(s) * E;
    const int e1 = argmax_except(p, E, -1);
    r.expert[static_cast<size_t>(s) * k] = e1;
    if (k == 2) r.expert[static_cast<size_t>(s) * k + 1] = argmax_except(p, E, e1);
  }
  // Locations: first choices in token order, then second choices after every first choice
  // (top2gating's locations2 += sum(mask1)); Mixtral's torch.where over [E, k, S] orders the
  // same way.
  for (int j = 0; j < k; ++j) {
    for (int s = 0; s < S; ++s) {
      const size_t slot = static_cast<size_t>(s) * k + j;
      const auto e = static_cast<size_t>(r.expert[slot]);
      r.location[slot] = r.counts[e]++;
      if (j == 0 || !gshard) r.top1_frac[e] += 1.0f / static_cast<float>(S);
    }
  }
  float aux = 0;
  for (int e = 0; e < E; ++e) {
    float me = 0;
    for (int s = 0; s < S; ++s) me += r.probs[static_cast<size_t>(s) * E + e];
    aux += me / static_cast<float>(S) * r.top1_frac[static_cast<size_t>(e)];
  }
  r.aux = aux * static_cast<float>(E);
  return r;
}

void apply_capacity(Routing& r, int capacity) {
  r.capacity = capacity;
  r.dropped = 0;
  for (int s = 0; s < r.S; ++s) {
    float z = 0;
    for (int j = 0; j < r.k; ++j) {
      const size_t slot = static_cast<size_t>(s) * r.k + j;
      if (capacity > 0 && r.location[slot] >= capacity) {
        r.location[slot] = -1;
        ++r.dropped;
        continue;
      }
      z += r.probs[static_cast<size_t>(s) * r.E + r.expert[slot]];
    }
    z = std::max(z, FLT_EPSILON);  // torch.clamp(denom_s, min=finfo.eps)
    for (int j = 0; j < r.k; ++j) {
      const size_t slot = static_cast<size_t>(s) * r.k + j;
      if (r.location[slot] < 0) continue;
      const float p = r.probs[static_cast<size_t>(s) * r.E + r.expert[slot]];
      r.weight[slot] = r.normalized ? p / z : p;
    }
  }
}

std::vector<float> router_backward(const Routing& r, const std::vector<float>& dweight,
                                   float daux) {
  const auto E = static_cast<size_t>(r.E);
  std::vector<float> dlogits(r.probs.size(), 0.0f), dp(E);
  for (int s = 0; s < r.S; ++s) {
    const float* p = r.probs.data() + static_cast<size_t>(s) * E;
    std::fill(dp.begin(), dp.end(), 0.0f);
    float z = 0, dot = 0;
    for (int j = 0; j < r.k; ++j) {
      const size_t slot = static_cast<size_t>(s) * r.k + j;
      if (r.location[slot] < 0) continue;
      z += p[r.expert[slot]];
      dot += dweight[slot] * r.weight[slot];
    }
    const bool clamped = z < FLT_EPSILON;
    for (int j = 0; j < r.k; ++j) {
      const size_t slot = static_cast<size_t>(s) * r.k + j;
      if (r.location[slot] < 0) continue;
      float d = dweight[slot];
      // w_j = p_j / z: dw_j/dp_i = (delta_ij - w_j) / z (z fixed at eps when clamped).
      if (r.normalized) d = clamped ? d / FLT_EPSILON : (d - dot) / z;
      dp[static_cast<size_t>(r.expert[slot])] += d;
    }
    for (size_t e = 0; e < E; ++e) {
      dp[e] += daux * static_cast<float>(r.E) * r.top1_frac[e] / static_cast<float>(r.S);
    }
    float pdp = 0;
    for (size_t e = 0; e < E; ++e) pdp += p[e] * dp[e];
    for (size_t e = 0; e < E; ++e) dlogits[static_cast<size_t>(s) * E + e] = p[e] * (dp[e] - pdp);
  }
  return dlogits;
}

}  // namespace fl::model
