// fl-recover: the built-in recovery policies, acting on a run through Control.
//   restart      a rank failed or progress stopped: restart every rank from the last checkpoint
//   shrink       a rank failed: restart without it, in a smaller data-parallel world (--dp N, any
//                size below the current one; default half), the harness resharding the checkpoint
//   microbatch   out of memory: restart with half the micro-batch and twice the accumulation
//                (same global batch)
//   skip-batch   a non-finite loss at step S: restart and skip the batches of step S
//   reset-scale  the fp16 loss scaler gave up: restart with the loss scale reset
// One action per incarnation of the job, at most --max-restarts in all.
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/detectors/tool_main.hpp"

using namespace fl::detect;

namespace {

// The last value of `opt` in a launch command (workers take an option's last occurrence).
int last_int_arg(const nlohmann::json& argv, const std::string& opt, int fallback) {
  int v = fallback;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i].is_string() && argv[i].get<std::string>() == opt) {
      v = std::stoi(argv[i + 1].get<std::string>());
    }
  }
  return v;
}

// The newest RUN_DIR/checkpoints/step_N with N <= `step` (step_N resumes at step N), or "".
std::string checkpoint_at_or_before(int64_t step) {
  const char* run_dir = std::getenv("FAULTLINE_RUN_DIR");
  if (!run_dir) return "";
  const std::filesystem::path dir = std::filesystem::path(run_dir) / "checkpoints";
  std::error_code ec;
  int64_t best = -1;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) != 0 || !std::filesystem::exists(e.path() / "manifest.json")) continue;
    const int64_t k = std::stoll(n.substr(5));
    if (k <= step) best = std::max(best, k);
  }
  return best < 0 ? "" : (dir / ("step_" + std::to_string(best))).string();
}

struct RecoverOptions {
  std::string policy = "restart";
  int max_restarts = 3;
  double hang_s = 8;
  int shrink_dp = 0;
};

class Recovery {
 public:
  Recovery(Tool& tool, const RecoverOptions& o) : tool_(tool), o_(o) {}

  void on_event(const Event& e) {
    if (e.kind == "launch" && e.rank == 0 && e.data.contains("argv")) launch_argv_ = e.data["argv"];
    // The batch a training rank runs, as it reports it (the harness leaves a flag at its
    // default off the command line, so the argv alone does not say).
    if (e.kind == "layout" && e.source == "rank") {
      micro_batch_ = e.data.value("micro_batch", 0);
      grad_accum_ = e.data.value("grad_accum", 0);
    }
    track_progress(e);
    const bool failed = e.source == "harness" && e.kind == "rank_exit" &&
                        e.data.value("class", "ok") != "ok" && !e.data.value("by_harness", false);
    const std::string err =
        e.source == "rank" && e.kind == "error" ? e.data.value("class", "") : "";
    const std::string& policy = o_.policy;
    if (policy == "restart" && failed) {
      act(fmt::format("rank {} ended ({})", e.rank, e.data.value("class", "")), {}, 0);
    } else if (policy == "shrink" && failed) {
      const int dp = last_int_arg(launch_argv_, "--dp", 1);
      const int to = o_.shrink_dp > 0 ? o_.shrink_dp : dp / 2;
      if (dp > 1 && to >= 1 && to < dp) act(fmt::format("rank {} ended", e.rank), {}, to);
    } else if (policy == "microbatch" && err == "out of memory") {
      const int mb =
          micro_batch_ > 0 ? micro_batch_ : last_int_arg(launch_argv_, "--micro-batch", 1);
      const int ga = grad_accum_ > 0 ? grad_accum_ : last_int_arg(launch_argv_, "--grad-accum", 1);
      if (mb > 1) {
        act("out of memory on rank " + std::to_string(e.rank),
            {"--micro-batch", std::to_string(mb / 2), "--grad-accum", std::to_string(ga * 2)}, 0);
      }
    } else if (policy == "skip-batch" && e.kind == "step" && e.source == "rank" &&
               (!e.data.contains("loss") || e.data["loss"].is_null())) {
      // Resume from before the bad batch (a later checkpoint may hold its damage).
      act(fmt::format("non-finite loss at step {}", e.step),
          {"--skip-batches", std::to_string(e.step)}, 0, checkpoint_at_or_before(e.step));
    } else if (policy == "reset-scale" && err == "loss scale") {
      act("loss scale collapsed on rank " + std::to_string(e.rank), {"--reset-loss-scale"}, 0);
    }
  }

  void on_tick(int64_t now) {
    if (o_.policy != "restart" || progress_ns_ < 0 || tool_.view().alive().empty()) return;
    // ...and a gap must also span 5 of the incarnation's median step intervals (slow steps
    // of a busy host are no hang).
    const double need_ns = std::max(o_.hang_s * 1e9, 5 * median(intervals_));
    if (static_cast<double>(now - progress_ns_) > need_ns) {
      act(fmt::format("no progress for {:.1f} s at step {}", (now - progress_ns_) / 1e9, top_step_),
          {}, 0);
    }
  }

 private:
  // The hang clock starts at the first step of each incarnation: how long ranks take to
  // start (and a restart to load its checkpoint) depends on the host's load, not on a hang.
  void track_progress(const Event& e) {
    if (e.kind == "launch" || e.kind == "restart") {
      progress_ns_ = -1;
      top_step_ = -1;
      intervals_.clear();
    }
    if (e.kind == "step" && e.step > top_step_) {
      top_step_ = e.step;
      if (progress_ns_ >= 0) intervals_.push_back(static_cast<double>(e.t_ns - progress_ns_));
      progress_ns_ = e.t_ns;
    }
  }

  // One restart per incarnation of the job, --max-restarts in all; says what it did on stdout.
  void act(const std::string& why, std::vector<std::string> args, int dp,
           const std::string& checkpoint = "") {
    const int inc = tool_.view().incarnation;
    if (acted_in_ == inc || restarts_ >= o_.max_restarts) return;
    acted_in_ = inc;
    ++restarts_;
    std::string reply;
    const bool ok = tool_.control("restart_job", -1, args, dp, &reply, checkpoint);
    std::printf("%s: %s -> restart_job%s%s: %s (%s)\n", tool_.name().c_str(), why.c_str(),
                args.empty() ? "" : fmt::format(" args [{}]", fmt::join(args, " ")).c_str(),
                dp > 0 ? fmt::format(" dp {}", dp).c_str() : "", ok ? "ok" : "refused",
                reply.c_str());
    std::fflush(stdout);
  }

  Tool& tool_;
  const RecoverOptions o_;
  int restarts_ = 0, acted_in_ = -1;
  int micro_batch_ = 0, grad_accum_ = 0;  // from the ranks' layout events (0: none yet)
  int64_t progress_ns_ = -1, top_step_ = -1;
  std::vector<double> intervals_;  // ns between new top steps of this incarnation
  nlohmann::json launch_argv_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fl-recover: restart, shrink, microbatch, skip-batch or reset-scale"};
  RecoverOptions o;
  app.add_option("--policy", o.policy, "Recovery policy")
      ->check(CLI::IsMember({"restart", "shrink", "microbatch", "skip-batch", "reset-scale"}))
      ->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts, "Give up after this many")
      ->capture_default_str();
  app.add_option("--hang-s", o.hang_s,
                 "restart: no progress this long (after the first step of a launch or restart, and "
                 "5 median step intervals) while ranks live is a hang")
      ->capture_default_str();
  app.add_option("--dp", o.shrink_dp,
                 "shrink: the data-parallel size to restart at (any size from 1 to the current "
                 "one - 1; 0: half the current one)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  return run_tool<Recovery>(app, argc, argv, "recover", o);
}
