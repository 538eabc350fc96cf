// The smallest useful detector, on the generated gRPC stub alone: it follows the run's events and
// reports every rank that fails, with the rank's own error message as evidence. Start from here
// (docs/detectors.md):
//   faultline run scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml \
//       --detector build/harness/detectors/fl-example-detector
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/proto/faultline.grpc.pb.h"

int main() {
  const char* addr = std::getenv("FAULTLINE_CONTROL_ADDR");  // set by the harness
  if (!addr) {
    std::fprintf(stderr, "FAULTLINE_CONTROL_ADDR is not set\n");
    return 2;
  }
  // Every call presents the run's secret (also set by the harness) as metadata.
  const char* secret = std::getenv("FAULTLINE_CONTROL_SECRET");
  const std::string auth = secret ? secret : "";
  auto stub = faultline::v1::Controller::NewStub(
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("faultline-secret", auth);
  faultline::v1::ObserveRequest req;
  req.set_from_start(true);  // everything so far, then live
  auto stream = stub->Observe(&ctx, req);
  faultline::v1::Event e;
  int posted = 0;
  while (stream->Read(&e)) {
    if (e.kind() == "run_ending") break;  // the harness is about to stop us
    if (e.kind() != "error") continue;
    const auto data = nlohmann::json::parse(e.data_json());
    faultline::v1::Diagnosis d;
    d.set_detector("example");
    d.set_symptom("unknown");  // this example does not classify
    d.add_ranks(e.rank());
    d.set_step(e.step());
    d.set_confidence(0.5);
    d.set_evidence(data.value("message", ""));
    faultline::v1::ReportAck ack;
    grpc::ClientContext rctx;
    rctx.AddMetadata("faultline-secret", auth);
    if (stub->Report(&rctx, d, &ack).ok()) ++posted;
  }
  ctx.TryCancel();
  std::printf("example: %d diagnosis(es) posted\n", posted);
  return 0;
}
