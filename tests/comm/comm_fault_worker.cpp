// A worker for launch tests: bootstraps like a real worker (store, world check, MPI world, and the
// fault plan from FAULTLINE_FAULTS), then runs a sequence of all-reduces, so a plan such as
// comm.all_reduce[rank=2,seq=3]=drop makes the other ranks' timeout path run for real.
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
