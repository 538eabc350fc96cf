// What a rank streams about its collectives. Every state change of every op costs the rank and
// the harness more than the step itself on small models (2x step time on the tiny config under
// the harness), so by default only what a detector needs leaves the rank: an op that has been in
// flight longer than FAULTLINE_TELEMETRY_STALL_MS (once, with its age), how that op then ended,
// and every timeout or failure. The flight recorder still keeps every op, dumped on timeout.
//   FAULTLINE_TELEMETRY_COLLECTIVES=all     every state change (debugging, trace viewers)
//   FAULTLINE_TELEMETRY_COLLECTIVES=stalls  the default above
//   FAULTLINE_TELEMETRY_COLLECTIVES=off     nothing
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/settings.hpp"
#include "workloads/comm/flight_recorder.hpp"

namespace fl::comm {

FAULTLINE_SETTING(kCollectiveEvents, std::string, "FAULTLINE_TELEMETRY_COLLECTIVES", "stalls",
                  "Collective telemetry: all (every state change), stalls (ops in flight longer "
                  "than FAULTLINE_TELEMETRY_STALL_MS, and failures), off");
FAULTLINE_SETTING(kStallMs, int64_t, "FAULTLINE_TELEMETRY_STALL_MS", 200,
                  "stalls mode: report an op once it has been in flight this long");

class CollectiveWatch {
 public:
  // Installs itself as `recorder`'s listener according to the settings (throws SettingError on a
  // bad mode). Returns null for "off".
  static std::shared_ptr<CollectiveWatch> install(FlightRecorder& recorder);
  ~CollectiveWatch();

  void on_change(const FlightEntry& e);

 private:
  CollectiveWatch(bool all, int64_t stall_ms);
  void loop();

  struct Open {
    FlightEntry entry;
    bool reported = false;
  };
  const bool all_;
  const int64_t stall_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<uint64_t, Open> open_;  // by flight-recorder id
  std::thread thread_;
};

}  // namespace fl::comm
