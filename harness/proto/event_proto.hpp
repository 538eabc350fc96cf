// The one conversion between a run event (base/event.hpp) and its gRPC message
// (faultline.proto's Event). Used by the workers' telemetry transport (worker -> Connect), the
// control plane (Connect ingestion, Observe replay and live stream) and the detector client
// (Observe -> tool). The message carries every field but the history's index and late flag;
// the history's time travels as harness_ns.
#pragma once

#include "base/event.hpp"
#include "harness/proto/faultline.pb.h"

namespace fl {

void to_proto(const Event& e, faultline::v1::Event* p);
faultline::v1::Event to_proto(const Event& e);
Event from_proto(const faultline::v1::Event& p);

}  // namespace fl
