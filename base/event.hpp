// One event of a run, the same value from the worker that emits it to the history that records
// it: a rank's telemetry (workloads/telemetry) fills the source's fields, the harness's history
// (harness/history/history.hpp, where it is HistoryEvent) adds its index, its time and the late
// flag. Both write it as one JSON line with to_json_line and read it back with parse_json_line;
// the gRPC message (harness/proto/event_proto.hpp) converts to and from it in one place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fl {

struct Event {
  // Stamped by the history.
  uint64_t index = 0;  // position in the history
  int64_t t_ns = 0;    // harness time, ns since the run started
  // Stamped by the source.
  std::string source;        // rank, harness, injector, detector:<name>, control
  int rank = -1;             // -1 for events of the harness, the injector or a detector
  uint64_t seq = 0;          // the source's own counter (rank events), from 0
  int64_t time_unix_ns = 0;  // when the source emitted it (its wall clock)
  std::string kind;          // hello, heartbeat, step, collective, error, exit, fault_fired, ...
  int64_t step = -1;         // training step when known, else -1
  std::string data_json = "{}";  // the kind's fields: one JSON object, as text
  // Stamped by the history: recovered from a rank's local file after the stream missed it.
  bool late = false;
};

// The two line formats of an event (docs/harness.md).
enum class EventLine {
  // A rank's own file (ranks/rankN/events.jsonl; the probe's probe.jsonl without "rank"):
  //   {"rank":R,"seq":S,"time_unix_ns":T,"kind":K,"step":N,"data":{...}}
  kRank,
  // The run history (history.jsonl): the history's stamps around the rank fields,
  //   {"i":I,"t_ns":T,"source":S,"rank":...,"data":{...}} plus ,"late":true for a late event
  kHistory,
};

// One line (ending in '\n') holding `e` in `format`. The data is JSON text already (built with
// nlohmann by whoever emitted it, re-serialised by the history's check): it is spliced in as is
// ("{}" when empty), not parsed again. Source and kind are escaped as JSON strings, with bytes
// that are not UTF-8 replaced. This is the one writer of both formats; it is not built with
// nlohmann::json because that costs a parse of the data on every line (docs/harness.md has the
// measurement).
std::string to_json_line(const Event& e, EventLine format);

// The longest event line a reader takes: an event's data is at most 1 MiB (event_schema.cpp), and
// the envelope around it is short. Readers of a rank's or a history's lines skip and count a
// longer line without holding it.
constexpr size_t kMaxEventLineBytes = (size_t{1} << 20) + (size_t{64} << 10);

// The event on one line in `format`, parsed with parse_json_bounded (base/json_bounded.hpp: at
// most 64 levels deep and kMaxEventLineBytes long). kHistory needs every envelope field ("late"
// is optional); kRank takes what it finds (rank -1, seq 0, time 0, kind "", step -1, data {} when
// missing), so the caller decides what a line without a kind or rank, or with data that is not an
// object, means. Throws fl::JsonRefused on a line that is not JSON (a torn last line included),
// too deep or too long, and nlohmann::json::exception on a field of the wrong type.
Event parse_json_line(std::string_view line, EventLine format);

}  // namespace fl
