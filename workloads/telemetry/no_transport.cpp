// Builds without gRPC (FAULTLINE_GRPC=OFF): events stay in the rank's local JSONL file.
#include "workloads/telemetry/telemetry.hpp"

namespace fl::telemetry {

std::unique_ptr<Transport> connect_transport(const std::string&, int, CommandHandler,
                                             std::string* why) {
  *why = "this build has no gRPC (FAULTLINE_GRPC=OFF)";
  return nullptr;
}

}  // namespace fl::telemetry
