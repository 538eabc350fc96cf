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

double max_across_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

struct BenchOptions {
  std::string min_s = "1K", max_s = "64M", op_s = "all_reduce", json_path;
  int factor = 4, iters = 10, warmup = 5, rounds = 11;
  double min_ratio = 0;
};

void add_options(CLI::App& app, BenchOptions& o) {
  app.add_option("-b,--minbytes", o.min_s, "Smallest size");
  app.add_option("-e,--maxbytes", o.max_s, "Largest size");
  app.add_option("-f,--stepfactor", o.factor, "Size multiplier between rows");
  app.add_option("-n,--iters", o.iters, "Timed iterations per round");
  app.add_option("-w,--warmup", o.warmup, "Warm-up iterations");
  app.add_option("-r,--rounds", o.rounds, "Interleaved rounds (medians reported)");
  app.add_option("-o,--op", o.op_s, "all_reduce, reduce_scatter, all_gather, broadcast")
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather", "broadcast"}));
  app.add_option("-J,--json", o.json_path, "Write results as JSON");
  app.add_option("--min-ratio", o.min_ratio,
                 "Exit 1 if the layer/raw throughput ratio at 4 MiB is below this");
}

OpKind op_of(const std::string& op_s) {
  return op_s == "all_reduce"       ? OpKind::kAllReduce
         : op_s == "reduce_scatter" ? OpKind::kReduceScatter
         : op_s == "all_gather"     ? OpKind::kAllGather
                                    : OpKind::kBroadcast;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// One row's op: its buffers, and the same collective through this layer and through raw MPI.
class SizeRow {
 public:
  SizeRow(fl::comm::MpiCommunicator& world, OpKind op, int n, size_t bytes)
      : world_(world), op_(op), n_(n) {
    // all_reduce counts elements per rank; reduce_scatter/all_gather count the full buffer.
    count_ = std::max<size_t>(1, bytes / sizeof(float));
    if (sharded()) count_ = std::max<size_t>(static_cast<size_t>(n), count_ / n * n);
    per_rank_ = sharded() ? count_ / n : count_;
    a_.assign(count_, 1.0f);
    b_.assign(count_, 0.0f);
  }

  size_t count() const { return count_; }

  void layer_op() {
    using fl::comm::host_buffer;
    switch (op_) {
      case OpKind::kAllReduce:
        world_.all_reduce(host_buffer(a_.data(), count_, fl::DType::kF32));
        break;
      case OpKind::kReduceScatter:
        world_.reduce_scatter(host_buffer(a_.data(), count_, fl::DType::kF32),
                              host_buffer(b_.data(), per_rank_, fl::DType::kF32));
        break;
      case OpKind::kAllGather:
        world_.all_gather(host_buffer(a_.data(), per_rank_, fl::DType::kF32),
                          host_buffer(b_.data(), count_, fl::DType::kF32));
        break;
      default:
        world_.broadcast(host_buffer(a_.data(), count_, fl::DType::kF32), 0);
        break;
    }
  }

  void raw_op() {
    MPI_Comm raw = world_.raw();
    int c = static_cast<int>(count_), pr = static_cast<int>(per_rank_);
    switch (op_) {
      case OpKind::kAllReduce:
        MPI_Allreduce(MPI_IN_PLACE, a_.data(), c, MPI_FLOAT, MPI_SUM, raw);
        break;
      case OpKind::kReduceScatter:
        MPI_Reduce_scatter_block(a_.data(), b_.data(), pr, MPI_FLOAT, MPI_SUM, raw);
        break;
      case OpKind::kAllGather:
        MPI_Allgather(a_.data(), pr, MPI_FLOAT, b_.data(), pr, MPI_FLOAT, raw);
        break;
      default:
        MPI_Bcast(a_.data(), c, MPI_FLOAT, 0, raw);
        break;
    }
  }

  // Values stay small integers: refill before each timed block.
  void refill() { std::fill(a_.begin(), a_.end(), 1.0f); }

  // Elements wrong after one op of this layer on rank + 1 from every rank, over all ranks.
  int wrong_results(int rank) {
    std::fill(a_.begin(), a_.end(), static_cast<float>(rank + 1));
    layer_op();
    const float want =
        op_ == OpKind::kAllReduce || op_ == OpKind::kReduceScatter ? n_ * (n_ + 1) / 2.0f : 1.0f;
    auto is_wrong = [&](float v) { return v != want; };
    int wrong = 0;
    if (op_ == OpKind::kReduceScatter) {
      wrong = static_cast<int>(
          std::count_if(b_.begin(), b_.begin() + static_cast<long>(per_rank_), is_wrong));
    } else if (op_ == OpKind::kAllGather) {
      for (int r = 0; r < n_; ++r) {
        for (size_t k = 0; k < per_rank_; ++k)
          wrong += b_[r * per_rank_ + k] != static_cast<float>(r + 1);
      }
    } else {  // all_reduce, broadcast: in place
      wrong = static_cast<int>(std::count_if(a_.begin(), a_.end(), is_wrong));
    }
    int total_wrong = 0;
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return total_wrong;
  }

 private:
  bool sharded() const { return op_ == OpKind::kReduceScatter || op_ == OpKind::kAllGather; }

  fl::comm::MpiCommunicator& world_;
  OpKind op_;
  int n_;
  size_t count_ = 0, per_rank_ = 0;
  std::vector<float> a_, b_;
};

struct RowTimes {
  double layer_us, raw_us, ratio;  // medians over the rounds; ratio: throughput layer/raw
};

// Rounds alternate which side goes first; the medians of both and of the per-round ratio are
// reported, which is stable on an oversubscribed machine where single rounds are not.
RowTimes time_rounds(SizeRow& row, const BenchOptions& o) {
  auto time_it = [&](auto&& f) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < o.iters; ++i) f();
    return max_across_ranks((MPI_Wtime() - t0) / o.iters * 1e6);
  };
  auto layer = [&] { row.layer_op(); };
  auto raw = [&] { row.raw_op(); };
  for (int i = 0; i < o.warmup; ++i) {
    row.layer_op();
    row.raw_op();
  }
  std::vector<double> layer_t, raw_t, ratios;
  for (int r = 0; r < o.rounds; ++r) {
    double tl, tr;
    if (r % 2 == 0) {
      row.refill();
      tl = time_it(layer);
      row.refill();
      tr = time_it(raw);
    } else {
      row.refill();
      tr = time_it(raw);
      row.refill();
      tl = time_it(layer);
    }
    layer_t.push_back(tl);
    raw_t.push_back(tr);
    ratios.push_back(tr / tl);
  }
  return {median(layer_t), median(raw_t), median(ratios)};
}

void print_header(const BenchOptions& o, int n, const fl::comm::MpiCommunicator& world) {
  std::printf("# faultline collective benchmark: %s, %d ranks, backend %s\n", o.op_s.c_str(), n,
              std::string(world.backend()).c_str());
  std::printf("# iters %d, warmup %d, rounds %d (medians), timeout %lld ms, verify %s\n", o.iters,
              o.warmup, o.rounds, static_cast<long long>(world.options().timeout.count()),
              world.options().verify ? "on" : "off");
  std::printf("# %10s %12s %6s %10s %9s %9s %10s %7s %6s\n", "size", "count", "type", "time",
              "algbw", "busbw", "raw time", "ratio", "#wrong");
  std::printf("# %10s %12s %6s %10s %9s %9s %10s %7s %6s\n", "(B)", "(elements)", "", "(us)",
              "(GB/s)", "(GB/s)", "(us)", "", "");
}

// Rank 0's footer: the 4 MiB ratio and the verdict, and the JSON file; the exit status.
int finish(const BenchOptions& o, OpKind op, int n, const nlohmann::json& rows, double ratio_4m) {
  int status = 0;
  int wrong_rows = 0;
  for (auto& r : rows) wrong_rows += r["wrong"].get<int>() != 0;
  if (ratio_4m >= 0) {
    std::printf("# layer/raw MPI throughput at 4 MiB: %.3f%s\n", ratio_4m,
                op == OpKind::kAllReduce ? " (budget >= 0.95)" : "");
  }
  std::printf("# %s\n", wrong_rows ? "FAILED: wrong results" : "all results correct");
  if (wrong_rows) status = 1;
  if (o.min_ratio > 0 && ratio_4m >= 0 && ratio_4m < o.min_ratio) status = 1;
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"op", o.op_s},          {"ranks", n},         {"backend", "mpi"},
                        {"iters", o.iters},      {"rounds", o.rounds}, {"rows", rows},
                        {"ratio_4mib", ratio_4m}};
    std::ofstream(o.json_path) << j.dump(2) << '\n';
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline collective benchmark (layer vs raw MPI, same run)"};
  BenchOptions o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  fl::comm::mpi_init_once();
  const int rank = fl::comm::mpi_world_rank();
  const int n = fl::comm::mpi_world_size();
  auto world = fl::comm::MpiCommunicator::create_world(rank, n);
  const OpKind op = op_of(o.op_s);
  const size_t lo = parse_size(o.min_s), hi = parse_size(o.max_s);

  if (rank == 0) print_header(o, n, *world);
  nlohmann::json rows = nlohmann::json::array();
  double ratio_4m = -1;
  for (size_t bytes = lo; bytes <= hi; bytes *= static_cast<size_t>(o.factor)) {
    SizeRow row(*world, op, n, bytes);
    const RowTimes best = time_rounds(row, o);
    // Correctness of one op of this layer at this size.
    const int total_wrong = row.wrong_results(rank);
    const size_t count = row.count();
    const double data_bytes = static_cast<double>(count * sizeof(float));
    const double algbw = data_bytes / best.layer_us / 1e3;
    const double busbw = algbw * bus_factor(op, n);
    if (bytes == 4u * 1024 * 1024) ratio_4m = best.ratio;
    if (rank == 0) {
      std::printf("  %10zu %12zu %6s %10.1f %9.3f %9.3f %10.1f %7.3f %6d\n", count * sizeof(float),
                  count, "float", best.layer_us, algbw, busbw, best.raw_us, best.ratio,
                  total_wrong);
      rows.push_back({{"bytes", count * sizeof(float)},
                      {"count", count},
                      {"type", "float"},
                      {"time_us", best.layer_us},
                      {"algbw_gbs", algbw},
                      {"busbw_gbs", busbw},
                      {"raw_time_us", best.raw_us},
                      {"ratio", best.ratio},
                      {"wrong", total_wrong}});
    }
  }
  int status = rank == 0 ? finish(o, op, n, rows, ratio_4m) : 0;
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return status;
}
