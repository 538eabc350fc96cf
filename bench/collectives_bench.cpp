// Collective benchmark in the style of nccl-tests: for each size, time this layer's op and the raw
// MPI call of the same size in the same run (interleaved rounds, best round kept), check the
// result, and print size, count, type, time, algbw, busbw and the ratio to raw MPI. -J writes JSON.
//
//   mpirun -np 4 fl-bench-collectives -b 1K -e 64M -f 4 -J out.json
#include <mpi.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/comm/mpi_communicator.hpp"

namespace {

using fl::comm::Communicator;
using fl::comm::OpKind;

size_t parse_size(const std::string& s) {
  size_t mult = 1;
  std::string num = s;
  char last = s.empty() ? '\0' : static_cast<char>(std::toupper(s.back()));
  if (last == 'K' || last == 'M' || last == 'G') {
    mult = last == 'K' ? 1024 : last == 'M' ? 1024 * 1024 : 1024ull * 1024 * 1024;
    num = s.substr(0, s.size() - 1);
  }
  return static_cast<size_t>(std::stoull(num)) * mult;
}

// Bus bandwidth factor (nccl-tests' definition): the per-link traffic of an optimal algorithm.
double bus_factor(OpKind op, int n) {
  switch (op) {
    case OpKind::kAllReduce:
      return 2.0 * (n - 1) / n;
    case OpKind::kReduceScatter:
    case OpKind::kAllGather:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

struct Timing {
  double layer_us = 0;
  double raw_us = 0;
  int wrong = 0;
};

double max_across_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline collective benchmark (layer vs raw MPI, same run)"};
  std::string min_s = "1K", max_s = "64M", op_s = "all_reduce", json_path;
  int factor = 4, iters = 10, warmup = 5, rounds = 11;
  double min_ratio = 0;
  app.add_option("-b,--minbytes", min_s, "Smallest size");
  app.add_option("-e,--maxbytes", max_s, "Largest size");
  app.add_option("-f,--stepfactor", factor, "Size multiplier between rows");
  app.add_option("-n,--iters", iters, "Timed iterations per round");
  app.add_option("-w,--warmup", warmup, "Warm-up iterations");
  app.add_option("-r,--rounds", rounds, "Interleaved rounds (medians reported)");
  app.add_option("-o,--op", op_s, "all_reduce, reduce_scatter, all_gather, broadcast")
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "broadcast"}));
  app.add_option("-J,--json", json_path, "Write results as JSON");
  app.add_option("--min-ratio", min_ratio,
                 "Exit 1 if the layer/raw throughput ratio at 4 MiB is below this");
  CLI11_PARSE(app, argc, argv);

  fl::comm::mpi_init_once();
  const int rank = fl::comm::mpi_world_rank();
  const int n = fl::comm::mpi_world_size();
  auto world = fl::comm::MpiCommunicator::create_world(rank, n);
  const OpKind op = op_s == "all_reduce"       ? OpKind::kAllReduce
                    : op_s == "reduce_scatter" ? OpKind::kReduceScatter
                    : op_s == "all_gather"     ? OpKind::kAllGather
                                               : OpKind::kBroadcast;
  const size_t lo = parse_size(min_s), hi = parse_size(max_s);

  if (rank == 0) {
    std::printf("# faultline collective benchmark: %s, %d ranks, backend %s\n", op_s.c_str(), n,
                std::string(world->backend()).c_str());
    std::printf("# iters %d, warmup %d, rounds %d (medians), timeout %lld ms, verify %s\n", iters,
                warmup, rounds, static_cast<long long>(world->options().timeout.count()),
                world->options().verify ? "on" : "off");
    std::printf("# %10s %12s %6s %10s %9s %9s %10s %7s %6s\n", "size", "count", "type", "time",
                "algbw", "busbw", "raw time", "ratio", "#wrong");
    std::printf("# %10s %12s %6s %10s %9s %9s %10s %7s %6s\n", "(B)", "(elements)", "", "(us)",
                "(GB/s)", "(GB/s)", "(us)", "", "");
  }
  nlohmann::json rows = nlohmann::json::array();
  double ratio_4m = -1;
  for (size_t bytes = lo; bytes <= hi; bytes *= static_cast<size_t>(factor)) {
    // all_reduce counts elements per rank; reduce_scatter/all_gather count the full buffer.
    size_t count = std::max<size_t>(1, bytes / sizeof(float));
    if (op == OpKind::kReduceScatter || op == OpKind::kAllGather) {
      count = std::max<size_t>(static_cast<size_t>(n), count / n * n);
    }
    const size_t per_rank =
        (op == OpKind::kReduceScatter || op == OpKind::kAllGather) ? count / n : count;
    std::vector<float> a(count, 1.0f), b(count, 0.0f);
    auto layer_op = [&] {
      using fl::comm::host_buffer;
      switch (op) {
        case OpKind::kAllReduce:
          world->all_reduce(host_buffer(a.data(), count, fl::DType::kF32));
          break;
        case OpKind::kReduceScatter:
          world->reduce_scatter(host_buffer(a.data(), count, fl::DType::kF32),
                                host_buffer(b.data(), per_rank, fl::DType::kF32));
          break;
        case OpKind::kAllGather:
          world->all_gather(host_buffer(a.data(), per_rank, fl::DType::kF32),
                            host_buffer(b.data(), count, fl::DType::kF32));
          break;
        default:
          world->broadcast(host_buffer(a.data(), count, fl::DType::kF32), 0);
          break;
      }
    };
    MPI_Comm raw = world->raw();
    auto raw_op = [&] {
      int c = static_cast<int>(count), pr = static_cast<int>(per_rank);
      switch (op) {
        case OpKind::kAllReduce:
          MPI_Allreduce(MPI_IN_PLACE, a.data(), c, MPI_FLOAT, MPI_SUM, raw);
          break;
        case OpKind::kReduceScatter:
          MPI_Reduce_scatter_block(a.data(), b.data(), pr, MPI_FLOAT, MPI_SUM, raw);
          break;
        case OpKind::kAllGather:
          MPI_Allgather(a.data(), pr, MPI_FLOAT, b.data(), pr, MPI_FLOAT, raw);
          break;
        default:
          MPI_Bcast(a.data(), c, MPI_FLOAT, 0, raw);
          break;
      }
    };
    auto time_it = [&](auto&& f) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) f();
      return max_across_ranks((MPI_Wtime() - t0) / iters * 1e6);
    };
    for (int i = 0; i < warmup; ++i) {
      layer_op();
      raw_op();
    }
    // Rounds alternate which side goes first; the medians of both and of the per-round ratio
    // are reported, which is stable on an oversubscribed machine where single rounds are not.
    std::vector<double> layer_t, raw_t, ratios;
    for (int r = 0; r < rounds; ++r) {
      double tl, tr;
      // Values stay small integers: refill before each timed block.
      if (r % 2 == 0) {
        std::fill(a.begin(), a.end(), 1.0f);
        tl = time_it(layer_op);
        std::fill(a.begin(), a.end(), 1.0f);
        tr = time_it(raw_op);
      } else {
        std::fill(a.begin(), a.end(), 1.0f);
        tr = time_it(raw_op);
        std::fill(a.begin(), a.end(), 1.0f);
        tl = time_it(layer_op);
      }
      layer_t.push_back(tl);
      raw_t.push_back(tr);
      ratios.push_back(tr / tl);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    Timing best{median(layer_t), median(raw_t), 0};
    // Correctness of one op of this layer at this size.
    std::fill(a.begin(), a.end(), static_cast<float>(rank + 1));
    layer_op();
    const float want =
        op == OpKind::kAllReduce || op == OpKind::kReduceScatter ? n * (n + 1) / 2.0f : 1.0f;
    int wrong = 0;
    if (op == OpKind::kAllReduce) {
      wrong =
          static_cast<int>(std::count_if(a.begin(), a.end(), [&](float v) { return v != want; }));
    } else if (op == OpKind::kReduceScatter) {
      wrong = static_cast<int>(std::count_if(b.begin(), b.begin() + static_cast<long>(per_rank),
                                             [&](float v) { return v != want; }));
    } else if (op == OpKind::kAllGather) {
      for (int r = 0; r < n; ++r) {
        for (size_t k = 0; k < per_rank; ++k)
          wrong += b[r * per_rank + k] != static_cast<float>(r + 1);
      }
    } else {
      wrong =
          static_cast<int>(std::count_if(a.begin(), a.end(), [&](float v) { return v != want; }));
    }
    int total_wrong = 0;
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

    const double data_bytes = static_cast<double>(count * sizeof(float));
    const double algbw = data_bytes / best.layer_us / 1e3;
    const double busbw = algbw * bus_factor(op, n);
    const double ratio = median(ratios);  // throughput ratio layer/raw, median over rounds
    if (bytes == 4u * 1024 * 1024) ratio_4m = ratio;
    if (rank == 0) {
      std::printf("  %10zu %12zu %6s %10.1f %9.3f %9.3f %10.1f %7.3f %6d\n", count * sizeof(float),
                  count, "float", best.layer_us, algbw, busbw, best.raw_us, ratio, total_wrong);
      rows.push_back({{"bytes", count * sizeof(float)},
                      {"count", count},
                      {"type", "float"},
                      {"time_us", best.layer_us},
                      {"algbw_gbs", algbw},
                      {"busbw_gbs", busbw},
                      {"raw_time_us", best.raw_us},
                      {"ratio", ratio},
                      {"wrong", total_wrong}});
    }
  }
  int status = 0;
  if (rank == 0) {
    int wrong_rows = 0;
    for (auto& r : rows) wrong_rows += r["wrong"].get<int>() != 0;
    if (ratio_4m >= 0) {
      std::printf("# layer/raw MPI throughput at 4 MiB: %.3f%s\n", ratio_4m,
                  op == OpKind::kAllReduce ? " (budget >= 0.95)" : "");
    }
    std::printf("# %s\n", wrong_rows ? "FAILED: wrong results" : "all results correct");
    if (wrong_rows) status = 1;
    if (min_ratio > 0 && ratio_4m >= 0 && ratio_4m < min_ratio) status = 1;
    if (!json_path.empty()) {
      nlohmann::json j = {
          {"op", op_s},       {"ranks", n},   {"backend", "mpi"},      {"iters", iters},
          {"rounds", rounds}, {"rows", rows}, {"ratio_4mib", ratio_4m}};
      std::ofstream(json_path) << j.dump(2) << '\n';
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return status;
}
