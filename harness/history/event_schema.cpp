#include "harness/history/event_schema.hpp"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json_bounded.hpp"
#include "base/utf8.hpp"

namespace fl::harness {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxData = 1 << 20;  // bytes of one event's data
constexpr size_t kMaxDataDepth = 64;  // levels of arrays and objects in it
constexpr int kMaxWorld = 1 << 16;
constexpr int kUnknownWorld = 4096;  // the ranks a history without run_start may name

enum class T { kString, kInt, kNumber, kNumberOrNull, kBool, kIntList, kNumberList };

bool has_type(const json& v, T t) {
  switch (t) {
    case T::kString:
      return v.is_string();
    case T::kInt:
      return v.is_number_integer();
    case T::kNumber:
      return v.is_number();
    case T::kNumberOrNull:
      return v.is_number() || v.is_null();
    case T::kBool:
      return v.is_boolean();
    case T::kIntList:
      return v.is_array() &&
             std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number_integer(); });
    case T::kNumberList:
      return v.is_array() &&
             std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number(); });
  }
  return false;
}

const char* type_name(T t) {
  switch (t) {
    case T::kString:
      return "a string";
    case T::kInt:
      return "an integer";
    case T::kNumber:
      return "a number";
    case T::kNumberOrNull:
      return "a number or null";
    case T::kBool:
      return "true or false";
    case T::kIntList:
      return "a list of integers";
    case T::kNumberList:
      return "a list of numbers";
  }
  return "?";
}

struct Field {
  const char* name;
  T type;
  bool required;
};

struct KindSpec {
  const char* kind;
  bool step_known;  // the event's step must be >= 0
  std::initializer_list<Field> fields;
};

// The rank events of docs/harness.md, with the fields something reads.
const KindSpec kRankKinds[] = {
    {"hello",
     false,
     {{"world_size", T::kInt, true}, {"pid", T::kInt, false}, {"error_file", T::kString, false}}},
    {"layout",
     false,
     {{"dp", T::kInt, true},
      {"tp", T::kInt, true},
      {"pp", T::kInt, true},
      {"zero", T::kInt, false},
      {"micro_batch", T::kInt, false},
      {"grad_accum", T::kInt, false}}},
    {"heartbeat", false, {}},
    // The probe's sections (NVRx's names: setup, step, checkpoint, eval): begin or end.
    {"section", false, {{"name", T::kString, true}, {"state", T::kString, true}}},
    {"step",
     true,
     {{"loss", T::kNumberOrNull, false},
      {"step_time_s", T::kNumber, false},
      {"interval_s", T::kNumber, false},
      {"comm_s", T::kNumber, false},
      {"comm_ops_s", T::kNumberList, false},
      {"mem_current", T::kInt, false},
      {"mem_peak", T::kInt, false},
      {"eval_loss", T::kNumberOrNull, false}}},
    {"collective",
     false,
     {{"op", T::kString, true},
      {"state", T::kString, true},
      {"group", T::kString, false},
      {"seq", T::kInt, false},
      {"in_flight_ms", T::kInt, false}}},
    // The Python probe's DDP mode on this rank (light or hook; docs/workloads.md).
    {"probe_mode", false, {{"ddp_comm", T::kString, true}}},
    {"fault_fired", false, {{"site", T::kString, true}}},
    {"faults_armed", false, {{"plan", T::kString, true}}},
    {"output",
     false,
     {{"what", T::kString, false}, {"digest", T::kString, false}, {"group", T::kString, false}}},
    // The tokens of one generate() call of the inference worker ([[...] per request]).
    {"generation", false, {{"call", T::kInt, true}, {"prompt_len", T::kInt, false}}},
    {"error",
     false,
     {{"class", T::kString, true}, {"message", T::kString, true}, {"exit_code", T::kInt, false}}},
    {"exit", false, {{"exit_code", T::kInt, true}, {"dropped", T::kInt, false}}},
    {"log", false, {{"level", T::kString, false}, {"message", T::kString, true}}},
    {"warning", false, {{"what", T::kString, false}, {"message", T::kString, true}}},
};

const KindSpec kDiagnosis = {"diagnosis",
                             false,
                             {{"detector", T::kString, true},
                              {"symptom", T::kString, true},
                              {"ranks", T::kIntList, true},
                              {"confidence", T::kNumber, false},
                              {"evidence", T::kString, false},
                              {"stage", T::kInt, false}}};

std::optional<std::string> check_fields(const KindSpec& spec, const json& d) {
  for (const auto& f : spec.fields) {
    auto it = d.find(f.name);
    if (it == d.end()) {
      if (f.required) return fmt::format("{}: data has no '{}'", spec.kind, f.name);
      continue;
    }
    if (!has_type(*it, f.type)) {
      return fmt::format("{}: data.{} must be {}", spec.kind, f.name, type_name(f.type));
    }
  }
  return std::nullopt;
}

bool word(const std::string& s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

bool known_source(const std::string& s) {
  if (s == "rank" || s == "harness" || s == "injector" || s == "control") return true;
  if (s.rfind("detector:", 0) != 0 || s.size() == 9 || s.size() > 200) return false;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> check_event(HistoryEvent& e, EventContext& ctx) {
  const int world = ctx.world > 0 ? ctx.world : ctx.live ? 0 : kUnknownWorld;
  e.source = valid_utf8(e.source);
  if (!known_source(e.source)) {
    return fmt::format(
        "unknown source '{}' (allowed: rank, harness, injector, control, "
        "detector:<name>)",
        e.source.substr(0, 64));
  }
  e.kind = valid_utf8(e.kind);
  if (!word(e.kind, 64)) {
    return fmt::format("kind '{}' is not a word of a-z, 0-9 and '_'", e.kind.substr(0, 64));
  }
  if (e.step < -1) return fmt::format("{}: step {} (allowed: -1 or more)", e.kind, e.step);
  if (e.data_json.size() > kMaxData) {
    return fmt::format("{}: data of {} bytes (allowed: up to {})", e.kind, e.data_json.size(),
                       kMaxData);
  }
  // Bounded: the dump() below and every later reader of the data recurse once per level.
  json d = json::object();
  if (!e.data_json.empty()) {
    try {
      d = parse_json_bounded(valid_utf8(e.data_json), JsonLimits{kMaxDataDepth, kMaxData});
    } catch (const JsonRefused& x) {
      if (x.fault() == JsonFault::kTooDeep) {
        return fmt::format("{}: data nested deeper than {} levels (allowed: up to {})", e.kind,
                           kMaxDataDepth, kMaxDataDepth);
      }
      return fmt::format("{}: data is not JSON", e.kind);
    }
  }
  if (!d.is_object()) return fmt::format("{}: data is not a JSON object", e.kind);
  e.data_json = d.dump();  // one line, valid UTF-8 (the parse checked it)

  if (e.source == "harness" || e.source == "injector" || e.source == "control") {
    // The harness's own events: a rank of the world or -1.
    if (e.rank < -1 || (world > 0 && e.rank >= world)) {
      return fmt::format("{} {}: rank {} is not -1 or a rank of the world", e.source, e.kind,
                         e.rank);
    }
    if (e.source == "harness" && e.kind == "run_start") {
      auto r = d.find("ranks");
      if (r == d.end() || !r->is_number_integer() || r->get<int64_t>() < 1 ||
          r->get<int64_t>() > kMaxWorld) {
        return fmt::format("run_start: data.ranks must be an integer 1-{}", kMaxWorld);
      }
      ctx.world = r->get<int>();
    }
    return std::nullopt;
  }
  if (e.source != "rank") {  // a detector: diagnoses only
    if (e.kind != "diagnosis") return fmt::format("{}: a detector sends diagnoses only", e.kind);
    if (e.rank != -1)
      return fmt::format("diagnosis: rank {} (a detector's events carry -1)", e.rank);
    if (auto why = check_fields(kDiagnosis, d)) return why;
    for (const auto& r : d["ranks"]) {
      const int64_t x = r.get<int64_t>();
      if (x < 0 || x >= world) {
        return fmt::format("diagnosis: data.ranks has {} (allowed 0-{})", x, world - 1);
      }
    }
    return std::nullopt;
  }
  if (world <= 0) return fmt::format("{}: a rank event before run_start", e.kind);
  if (e.rank < 0 || e.rank >= world) {
    return fmt::format("{}: rank {} is not a rank of the world (allowed 0-{})", e.kind, e.rank,
                       world - 1);
  }
  for (const auto& spec : kRankKinds) {
    if (e.kind != spec.kind) continue;
    if (spec.step_known && e.step < 0) {
      return fmt::format("{}: step {} (allowed: 0 or more)", e.kind, e.step);
    }
    return check_fields(spec, d);
  }
  return fmt::format("'{}' is not a kind of rank event", e.kind);
}

}  // namespace fl::harness
