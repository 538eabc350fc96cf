// A worker for launch tests: bootstraps like a real worker (store, world check, MPI world), runs a
// sequence of one collective, and can drop one op on one rank through the fault-site handler —
// the way the injector's drop action will — so the other ranks' timeout path runs for real.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "injector/site.hpp"
#include "workloads/comm/bootstrap.hpp"
#include "workloads/comm/worker_errors.hpp"

namespace {

struct Drop {
  int rank = -1;
  int64_t seq = -1;
  std::string op = "all_reduce";
} g_drop;
bool g_dropped_last = false;  // the op just issued was dropped on this rank

fl::fault::Verdict drop_handler(fl::fault::Site& site, fl::fault::SiteContext& ctx) {
  if (fl::fault::current_rank() == g_drop.rank && ctx.seq == g_drop.seq && ctx.op == g_drop.op) {
    site.fired.fetch_add(1);
    g_dropped_last = true;
    std::fprintf(stderr, "[rank %d] fault fired: drop %s seq %lld (site %s at %s:%d)\n",
                 g_drop.rank, g_drop.op.c_str(), static_cast<long long>(ctx.seq), site.name,
                 site.file, site.line);
    return fl::fault::Verdict::kSkip;
  }
  return fl::fault::Verdict::kProceed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"faultline comm test worker"};
  int ops = 8;
  size_t count = 1000;
  int64_t timeout_ms = 2000;
  int64_t finish_timeout_ms = -1;
  bool verify = false;
  app.add_option("--ops", ops, "Ops to run");
  app.add_option("--count", count, "Elements per op");
  app.add_option("--timeout-ms", timeout_ms, "Comm timeout");
  app.add_option("--finish-timeout-ms", finish_timeout_ms,
                 "Timeout of the final barrier (default: the comm timeout)");
  app.add_option("--drop-rank", g_drop.rank, "Rank that drops an op");
  app.add_option("--drop-seq", g_drop.seq, "Sequence number it drops");
  app.add_option("--drop-op", g_drop.op, "Op it drops");
  app.add_flag("--verify", verify, "Verify mode");
  CLI11_PARSE(app, argc, argv);

  return fl::comm::run_worker_main([&] {
    auto b = fl::comm::bootstrap_worker("comm-fault-worker", "mpi");
    auto& comm = *b.comm;
    comm.set_timeout(std::chrono::milliseconds(timeout_ms));
    comm.set_verify(verify);
    if (g_drop.rank >= 0) fl::fault::install_handler(&drop_handler);
    std::vector<float> buf(count);
    for (int i = 0; i < ops; ++i) {
      std::fill(buf.begin(), buf.end(), 1.0f);
      g_dropped_last = false;
      comm.all_reduce(fl::comm::host_buffer(buf.data(), buf.size(), fl::DType::kF32));
      if (!g_dropped_last && buf[0] != static_cast<float>(comm.size())) {
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
