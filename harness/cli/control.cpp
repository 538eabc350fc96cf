// `faultline control ADDRESS ACTION`: one Control call to a live run's control plane, with the
// run's secret. Exit 0 done, 1 refused by the run, 2 not reached or no secret.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <grpcpp/grpcpp.h>

#include "base/control_auth.hpp"
#include "harness/cli/command.hpp"
#include "harness/control/controller.hpp"
#include "harness/proto/faultline.grpc.pb.h"

namespace fl::cli {
namespace {

struct ControlArgs {
  std::string addr, action, plan, checkpoint, secret_file;
  int rank = -1, sig = 9;
};

// The secret from --secret-file, else as every client finds it; false: the file is unreadable.
bool read_secret(const ControlArgs& a, std::string& secret) {
  if (a.secret_file.empty()) {
    secret = fl::control_secret_for(a.addr);
    return true;
  }
  std::ifstream in(a.secret_file);
  if (in >> secret) return true;
  std::fprintf(stderr, "faultline control: cannot read the secret from %s\n",
               a.secret_file.c_str());
  return false;
}

int control(const ControlArgs& a) {
  std::string secret;
  if (!read_secret(a, secret)) return 2;
  auto stub = faultline::v1::Controller::NewStub(
      grpc::CreateChannel(a.addr, grpc::InsecureChannelCredentials()));
  faultline::v1::ControlRequest req;
  req.set_action(a.action);
  req.set_rank(a.rank);
  req.set_signal(a.sig);
  req.set_plan(a.plan);
  req.set_checkpoint(a.checkpoint);
  req.set_requester("faultline control");
  faultline::v1::ControlReply reply;
  grpc::ClientContext ctx;
  if (!secret.empty()) ctx.AddMetadata(fl::kControlSecretHeader, secret);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  const auto st = stub->Control(&ctx, req, &reply);
  if (!st.ok()) {
    std::fprintf(stderr, "faultline control: %s: %s\n", a.addr.c_str(), st.error_message().c_str());
    return 2;
  }
  std::printf("%s: %s\n", reply.ok() ? "ok" : "refused", reply.message().c_str());
  for (auto& f : reply.faults()) std::printf("  %s\n", f.c_str());
  return reply.ok() ? 0 : 1;
}

Handler setup_control(CLI::App& sub) {
  auto a = std::make_shared<ControlArgs>();
  sub.add_option("address", a->addr, "Control-plane address (printed in the run's history)")
      ->required();
  sub.add_option("action", a->action,
                 fmt::format("{}", fmt::join(fl::harness::control_action_names(), ", ")))
      ->required();
  sub.add_option("--rank", a->rank, "Target rank");
  sub.add_option("--signal", a->sig, "kill_rank: signal number");
  sub.add_option("--plan", a->plan, "arm_faults: fault plan");
  sub.add_option("--checkpoint", a->checkpoint, "restart_job: checkpoint directory");
  sub.add_option("--secret-file", a->secret_file,
                 "The run's control.secret (default: FAULTLINE_CONTROL_SECRET, or the "
                 "control.secret beside a unix:RUN_DIR/control.sock address)");
  return [a] { return control(*a); };
}

}  // namespace

const Command& control_command() {
  static const Command c{"control", "Act on a live run through its control plane", setup_control};
  return c;
}

}  // namespace fl::cli
