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

int main(int argc, char** argv) {
  CLI::App app{"faultline comm test worker"};
  int ops = 8;
  size_t count = 1000;
  int64_t timeout_ms = 2000;
  int64_t finish_timeout_ms = -1;
  bool verify = false;
  bool alternate = false;
  std::string op = "all_reduce";
  app.add_option("--op", op, "Ops to run: all_reduce, send_recv or split")
      ->check(CLI::IsMember({"all_reduce", "send_recv", "split"}));
  app.add_option("--ops", ops, "Ops to run");
  app.add_option("--count", count, "Elements per op");
  app.add_option("--timeout-ms", timeout_ms, "Comm timeout");
  app.add_option("--finish-timeout-ms", finish_timeout_ms,
                 "Timeout of the final barrier (default: the comm timeout)");
  app.add_flag("--verify", verify, "Verify mode");
  app.add_flag("--alternate-counts", alternate,
               "Odd ops use twice --count elements (so a reordered op changes the size called)");
  CLI11_PARSE(app, argc, argv);

  return fl::comm::run_worker_main([&] {
    auto b = fl::comm::bootstrap_worker("comm-fault-worker", "mpi");
    auto& comm = *b.comm;
    comm.set_timeout(std::chrono::milliseconds(timeout_ms));
    comm.set_verify(verify);
    const int rank = comm.rank(), size = comm.size();
    if (op == "send_recv") {
      const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
      std::vector<float> out(count), in(count);
      for (int i = 0; i < ops; ++i) {
        std::fill(out.begin(), out.end(), static_cast<float>(1000 * i + rank + 1));
        std::fill(in.begin(), in.end(), -1.0f);
        comm.send_recv(fl::comm::host_buffer(out.data(), count, fl::DType::kF32), next,
                       fl::comm::host_buffer(in.data(), count, fl::DType::kF32), prev);
        const float want = static_cast<float>(1000 * i + prev + 1);
        for (size_t e = 0; e < count; ++e) {
          if (in[e] != want) {
            std::fprintf(stderr,
                         "[rank %d] send_recv %d: element %zu from rank %d is %g, not %g (what "
                         "it sent in op %d)\n",
                         rank, i, e, prev, static_cast<double>(in[e]), static_cast<double>(want),
                         i);
            break;
          }
        }
      }
      std::printf("[rank %d] %d ops done\n", rank, ops);
      std::fflush(stdout);
      fl::comm::finish_worker(b);
      return 0;
    }
    if (op == "split") {
      auto half = comm.split(rank % 2, rank, "half");
      if (!half) {
        std::fprintf(stderr, "[rank %d] split gave no group\n", rank);
      } else {
        std::vector<float> ones(count, 1.0f);
        half->all_reduce(fl::comm::host_buffer(ones.data(), count, fl::DType::kF32));
        std::printf("[rank %d] all_reduce on half: %g\n", rank, static_cast<double>(ones[0]));
      }
      --ops;
    }
    std::vector<float> even(count), odd(alternate ? 2 * count : count);
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
    if (finish_timeout_ms > 0) comm.set_timeout(std::chrono::milliseconds(finish_timeout_ms));
    fl::comm::finish_worker(b);
    return 0;
  });
}
