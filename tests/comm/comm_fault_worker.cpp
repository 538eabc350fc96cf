// A worker for launch tests: bootstraps like a real worker (store, world check, MPI world, and the
// fault plan from FAULTLINE_FAULTS), then runs a sequence of ops, so a plan such as
// comm.all_reduce[rank=2,seq=3]=drop makes the other ranks' timeout path run for real.
//   --op all_reduce   all-reduces of ones; each result must be the world size
//   --op send_recv    a ring: op i sends 1000 * i + rank + 1 to the next rank while receiving
//                     from the previous one; every received element must be what that rank sent
//                     in op i (a message of another op, or a short one, is reported by element)
//   --op split        a split into even and odd ranks, an all-reduce on the half, then
//                     all-reduces on the world
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "injector/plan.hpp"
#include "workloads/comm/bootstrap.hpp"
#include "workloads/comm/worker_errors.hpp"

namespace {

struct Options {
  std::string op = "all_reduce";
  int ops = 8;
  size_t count = 1000;
  int64_t timeout_ms = 2000;
  int64_t finish_timeout_ms = -1;
  bool verify = false;
  bool alternate = false;
};

// The ring of --op send_recv; a received element that is not what its sender sent in this op is
// reported (the first per op).
void send_recv_ring(fl::comm::Communicator& comm, const Options& o) {
  const int rank = comm.rank(), size = comm.size();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  std::vector<float> out(o.count), in(o.count);
  for (int i = 0; i < o.ops; ++i) {
    std::fill(out.begin(), out.end(), static_cast<float>(1000 * i + rank + 1));
    std::fill(in.begin(), in.end(), -1.0f);
    comm.send_recv(fl::comm::host_buffer(out.data(), o.count, fl::DType::kF32), next,
                   fl::comm::host_buffer(in.data(), o.count, fl::DType::kF32), prev);
    const float want = static_cast<float>(1000 * i + prev + 1);
    for (size_t e = 0; e < o.count; ++e) {
      if (in[e] != want) {
        std::fprintf(stderr,
                     "[rank %d] send_recv %d: element %zu from rank %d is %g, not %g (what "
                     "it sent in op %d)\n",
                     rank, i, e, prev, static_cast<double>(in[e]), static_cast<double>(want), i);
        break;
      }
    }
  }
  std::printf("[rank %d] %d ops done\n", rank, o.ops);
  std::fflush(stdout);
}

// --op split: an all-reduce of ones on this rank's half (even or odd ranks).
void all_reduce_on_half(fl::comm::Communicator& comm, size_t count) {
  const int rank = comm.rank();
  auto half = comm.split(rank % 2, rank, "half");
  if (!half) {
    std::fprintf(stderr, "[rank %d] split gave no group\n", rank);
    return;
  }
  std::vector<float> ones(count, 1.0f);
  half->all_reduce(fl::comm::host_buffer(ones.data(), count, fl::DType::kF32));
  std::printf("[rank %d] all_reduce on half: %g\n", rank, static_cast<double>(ones[0]));
}

// `ops` all-reduces of ones on the world; 1 on a wrong result (a dropped op is reported, not
// checked).
int all_reduces(fl::comm::Communicator& comm, const Options& o, int ops) {
  std::vector<float> even(o.count), odd(o.alternate ? 2 * o.count : o.count);
  for (int i = 0; i < ops; ++i) {
    auto& buf = i % 2 ? odd : even;
    std::fill(buf.begin(), buf.end(), 1.0f);
    const size_t fired_before = fl::fault::fired_log().size();
    comm.all_reduce(fl::comm::host_buffer(buf.data(), buf.size(), fl::DType::kF32));
    const bool dropped = fl::fault::fired_log().size() != fired_before;
    if (dropped) {
      std::fprintf(stderr, "[rank %d] all_reduce %d was dropped by the fault plan\n", comm.rank(),
                   i);
    }
    if (!dropped && buf[0] != static_cast<float>(comm.size())) {
      std::fprintf(stderr, "[rank %d] wrong all_reduce result %f\n", comm.rank(), buf[0]);
      return 1;
    }
  }
  std::printf("[rank %d] %d ops ok\n", comm.rank(), ops);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline comm test worker"};
  Options o;
  app.add_option("--op", o.op, "Ops to run: all_reduce, send_recv or split")
      ->check(CLI::IsMember({"all_reduce", "send_recv", "split"}));
  app.add_option("--ops", o.ops, "Ops to run");
  app.add_option("--count", o.count, "Elements per op");
  app.add_option("--timeout-ms", o.timeout_ms, "Comm timeout");
  app.add_option("--finish-timeout-ms", o.finish_timeout_ms,
                 "Timeout of the final barrier (default: the comm timeout)");
  app.add_flag("--verify", o.verify, "Verify mode");
  app.add_flag("--alternate-counts", o.alternate,
               "Odd ops use twice --count elements (so a reordered op changes the size called)");
  CLI11_PARSE(app, argc, argv);

  return fl::comm::run_worker_main([&] {
    auto b = fl::comm::bootstrap_worker("comm-fault-worker", "mpi");
    auto& comm = *b.comm;
    comm.set_timeout(std::chrono::milliseconds(o.timeout_ms));
    comm.set_verify(o.verify);
    if (o.op == "send_recv") {
      send_recv_ring(comm, o);
      fl::comm::finish_worker(b);
      return 0;
    }
    int ops = o.ops;
    if (o.op == "split") {
      all_reduce_on_half(comm, o.count);
      --ops;  // the half's all-reduce counts as one
    }
    if (all_reduces(comm, o, ops) != 0) return 1;
    if (o.finish_timeout_ms > 0) comm.set_timeout(std::chrono::milliseconds(o.finish_timeout_ms));
    fl::comm::finish_worker(b);
    return 0;
  });
}
