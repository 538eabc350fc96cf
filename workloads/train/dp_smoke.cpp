// fl-dp-smoke: a short data-parallel training run used as the foundation's end-to-end smoke test
// until the GPT workloads land. A two-layer MLP learns a fixed random "teacher" MLP; each rank
// computes gradients on its shard of every global batch (OpenBLAS GEMM), gradients are averaged
// with one all_reduce, and every rank applies the same SGD update. The run fails unless the loss
// falls at least 5x and every rank ends with bitwise identical parameters.
#include <cblas.h>

#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "injector/site.hpp"
#include "workloads/runtime/runtime.hpp"

namespace {

struct Mlp {
  int in, hidden, out;
  std::vector<float> w1, b1, w2, b2;  // w1: in x hidden, w2: hidden x out (row-major)
  Mlp(int i, int h, int o, uint64_t seed, float scale)
      : in(i), hidden(h), out(o), w1(i * h), b1(h), w2(h * o), b2(o) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (auto& v : w1) v = n(rng) * scale / std::sqrt(static_cast<float>(i));
    for (auto& v : w2) v = n(rng) * scale / std::sqrt(static_cast<float>(h));
  }
  size_t num_params() const { return w1.size() + b1.size() + w2.size() + b2.size(); }
};

// Forward: h = tanh(x W1 + b1), y = h W2 + b2. x: batch x in.
void forward(const Mlp& m, const float* x, int batch, std::vector<float>& h,
             std::vector<float>& y) {
  h.assign(static_cast<size_t>(batch) * m.hidden, 0.0f);
  y.assign(static_cast<size_t>(batch) * m.out, 0.0f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, m.hidden, m.in, 1.0f, x, m.in,
              m.w1.data(), m.hidden, 0.0f, h.data(), m.hidden);
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < m.hidden; ++j)
      h[b * m.hidden + j] = std::tanh(h[b * m.hidden + j] + m.b1[j]);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, m.out, m.hidden, 1.0f, h.data(),
              m.hidden, m.w2.data(), m.out, 0.0f, y.data(), m.out);
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < m.out; ++j) y[b * m.out + j] += m.b2[j];
  }
}

// Sample i of this rank's shard of step `step`: the same values whatever the world size.
void make_batch(int step, int rank, int local, int in, std::vector<float>& x) {
  for (int i = 0; i < local; ++i) {
    std::mt19937_64 rng(static_cast<uint64_t>(step) * 1000003u +
                        static_cast<uint64_t>(rank * local + i));
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int k = 0; k < in; ++k) x[static_cast<size_t>(i) * in + k] = n(rng);
  }
}

// Mean squared error over the global batch (this rank's share) and dy = 2 (y - t) / (B * out).
float mse(const std::vector<float>& y, const std::vector<float>& ty, int global_batch, int out,
          std::vector<float>& dy) {
  dy.resize(y.size());
  float loss = 0;
  const float norm = 1.0f / static_cast<float>(global_batch * out);
  for (size_t i = 0; i < y.size(); ++i) {
    float d = y[i] - ty[i];
    loss += d * d * norm;
    dy[i] = 2.0f * d * norm;
  }
  return loss;
}

// Column sums of a batch x n matrix into `out`.
void bias_grad(const std::vector<float>& d, int batch, int n, float* out) {
  for (int j = 0; j < n; ++j) {
    out[j] = 0;
    for (int i = 0; i < batch; ++i) out[j] += d[static_cast<size_t>(i) * n + j];
  }
}

// Backward into the flat gradient buffer [w1 b1 w2 b2].
void backward(const Mlp& m, const std::vector<float>& x, const std::vector<float>& h,
              const std::vector<float>& dy, int local, std::vector<float>& grad,
              std::vector<float>& dh) {
  float* gw1 = grad.data();
  float* gb1 = gw1 + m.w1.size();
  float* gw2 = gb1 + m.b1.size();
  float* gb2 = gw2 + m.w2.size();
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m.hidden, m.out, local, 1.0f, h.data(),
              m.hidden, dy.data(), m.out, 0.0f, gw2, m.out);
  bias_grad(dy, local, m.out, gb2);
  dh.assign(h.size(), 0.0f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, local, m.hidden, m.out, 1.0f, dy.data(),
              m.out, m.w2.data(), m.out, 0.0f, dh.data(), m.hidden);
  for (size_t i = 0; i < dh.size(); ++i) dh[i] *= 1.0f - h[i] * h[i];
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m.in, m.hidden, local, 1.0f, x.data(), m.in,
              dh.data(), m.hidden, 0.0f, gw1, m.hidden);
  bias_grad(dh, local, m.hidden, gb1);
}

// xxh64 of the parameters, in [w1 b1 w2 b2] order.
int64_t params_hash(const Mlp& m) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  for (auto* p : {&m.w1, &m.b1, &m.w2, &m.b2}) {
    XXH64_update(st, p->data(), p->size() * sizeof(float));
  }
  const auto h = static_cast<int64_t>(XXH64_digest(st));
  XXH64_freeState(st);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  fl::worker::Runtime rt{"faultline data-parallel smoke training"};
  int steps = 100, global_batch = 64, seed = 7;
  float lr = 0.2f;
  rt.app().add_option("--steps", steps, "Training steps");
  rt.app().add_option("--global-batch", global_batch, "Samples per step across all ranks");
  rt.app().add_option("--lr", lr, "SGD learning rate");
  rt.app().add_option("--seed", seed, "Data and init seed");
  if (auto rc = rt.parse(argc, argv)) return *rc;

  const auto hash = fmt::format("dp-smoke:{}:{}:{}", steps, global_batch, seed);
  return rt.run(hash, nullptr, [&](fl::worker::Runtime::World& w) -> int {
    auto& comm = *w.b.comm;
    const int rank = comm.rank(), world = comm.size();
    if (global_batch % world != 0) {
      fl::raise("global batch {} is not divisible by the data-parallel size {}", global_batch,
                world);
    }
    const int local = global_batch / world;
    Mlp teacher(32, 48, 8, 1000 + static_cast<uint64_t>(seed), 1.5f);
    Mlp model(32, 64, 8, static_cast<uint64_t>(seed), 1.0f);
    std::vector<float> grad(model.num_params());
    std::vector<float> x(static_cast<size_t>(local) * model.in), h, y, th, ty, dy, dh;
    if (rank == 0) {
      std::printf("dp-smoke: %d ranks, %zu parameters, global batch %d (%d per rank), %d steps\n",
                  world, model.num_params(), global_batch, local, steps);
    }
    float first_loss = 0, loss = 0;
    for (int step = 0; step < steps; ++step) {
      fl::fault::set_step(step);
      make_batch(step, rank, local, model.in, x);
      forward(teacher, x.data(), local, th, ty);
      forward(model, x.data(), local, h, y);
      float local_loss = mse(y, ty, global_batch, model.out, dy);
      backward(model, x, h, dy, local, grad, dh);
      // Each rank's gradient is its share of the global-batch mean: summing gives the mean.
      comm.all_reduce(fl::comm::host_buffer(grad.data(), grad.size(), fl::DType::kF32));
      comm.all_reduce(fl::comm::host_buffer(&local_loss, 1, fl::DType::kF32));
      loss = local_loss;
      if (step == 0) first_loss = loss;
      size_t k = 0;
      for (auto* p : {&model.w1, &model.b1, &model.w2, &model.b2}) {
        for (auto& v : *p) v -= lr * grad[k++];
      }
      if (rank == 0 && (step % 10 == 0 || step == steps - 1)) {
        std::printf("step %4d  loss %.6f\n", step, loss);
      }
    }
    // Every rank must hold the same parameters, bit for bit.
    int64_t mine = params_hash(model);
    std::vector<int64_t> all(static_cast<size_t>(world));
    comm.all_gather(fl::comm::host_buffer(&mine, 1, fl::DType::kI64),
                    fl::comm::host_buffer(all.data(), all.size(), fl::DType::kI64));
    bool same = std::all_of(all.begin(), all.end(), [&](int64_t v) { return v == all[0]; });
    bool learned = loss * 5.0f < first_loss;
    if (rank == 0) {
      std::printf(
          "dp-smoke: loss %.6f -> %.6f (%.1fx lower), parameters %s across %d ranks "
          "(xxh64 %016llx)\n",
          first_loss, loss, first_loss / loss, same ? "identical" : "DIFFER", world,
          static_cast<unsigned long long>(all[0]));
      std::printf("dp-smoke: %s\n", same && learned ? "PASS" : "FAIL");
    }
    return same && learned ? 0 : 1;
  });
}
