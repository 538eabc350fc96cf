// Checks of a flight-recorder dump in PyTorch's schema, key by key as the analyzer
// (torch/distributed/flight_recorder: loader.py, builder.py, types.py, utils.py) reads it, and the
// pickle copy decoded by Debian's python3 against the JSON copy.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/process.hpp"

namespace fl::test {

inline void expect_pytorch_fr_schema(const nlohmann::json& t, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_TRUE(t.is_object());
  ASSERT_TRUE(t.contains("version") && t["version"].is_string());
  const std::string v = t["version"];
  EXPECT_NE(v.find('.'), std::string::npos) << "get_version_detail needs major.minor: " << v;
  ASSERT_TRUE(t.contains("pg_config") && t["pg_config"].is_object());
  ASSERT_TRUE(t.contains("pg_status") && t["pg_status"].is_object());
  ASSERT_TRUE(t.contains("entries") && t["entries"].is_array());
  for (const auto& [key, pg] : t["pg_config"].items()) {
    ASSERT_TRUE(pg.is_object()) << key;
    EXPECT_TRUE(pg.contains("name") && pg["name"].is_string()) << key;
    EXPECT_EQ(pg.value("name", ""), key);
    EXPECT_TRUE(pg.contains("desc") && pg["desc"].is_string()) << key;
    ASSERT_TRUE(pg.contains("ranks") && pg["ranks"].is_string()) << key;
    // ast.literal_eval of a list of ints: here, JSON of an int array.
    auto ranks = nlohmann::json::parse(pg["ranks"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(ranks.is_array() && !ranks.empty()) << pg["ranks"];
    for (const auto& r : ranks) EXPECT_TRUE(r.is_number_integer()) << pg["ranks"];
  }
  for (const auto& [key, st] : t["pg_status"].items()) {
    for (const char* k :
         {"last_enqueued_collective", "last_started_collective", "last_completed_collective"}) {
      EXPECT_TRUE(st.contains(k) && st[k].is_number_integer()) << key << " " << k;
    }
  }
  for (const auto& e : t["entries"]) {
    SCOPED_TRACE(e.dump());
    for (const char* k : {"record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id",
                          "time_created_ns", "timeout_ms"}) {
      EXPECT_TRUE(e.contains(k) && e[k].is_number_integer()) << k;
    }
    ASSERT_TRUE(e.contains("process_group") && e["process_group"].is_array() &&
                e["process_group"].size() == 2);
    EXPECT_TRUE(t["pg_config"].contains(e["process_group"][0].get<std::string>()))
        << "process_group[0] must be a pg_config key";
    ASSERT_TRUE(e.contains("profiling_name") && e["profiling_name"].is_string());
    const std::string name = e["profiling_name"];
    EXPECT_EQ(name.rfind("nccl:", 0), 0u) << "Op() splits on ':' and wants nccl or xccl";
    for (const char* k : {"input_sizes", "output_sizes"}) {
      ASSERT_TRUE(e.contains(k) && e[k].is_array() && !e[k].empty()) << k;
      for (const auto& s : e[k]) EXPECT_TRUE(s.is_array()) << k;
    }
    for (const char* k : {"input_dtypes", "output_dtypes"}) {
      ASSERT_TRUE(e.contains(k) && e[k].is_array()) << k;
      for (const auto& s : e[k]) EXPECT_TRUE(s.is_string()) << k;
    }
    ASSERT_TRUE(e.contains("state") && e["state"].is_string());
    const std::string state = e["state"];
    EXPECT_TRUE(state == "scheduled" || state == "started" || state == "completed") << state;
    for (const char* k : {"time_discovered_started_ns", "time_discovered_completed_ns"}) {
      EXPECT_TRUE(e.contains(k) && (e[k].is_null() || e[k].is_number_integer())) << k;
    }
    EXPECT_TRUE(e.contains("duration_ms") &&
                (e["duration_ms"].is_null() || e["duration_ms"].is_number()));
    EXPECT_TRUE(e.contains("retired") && e["retired"].is_boolean());
    ASSERT_TRUE(e.contains("is_p2p") && e["is_p2p"].is_boolean());
    EXPECT_EQ(e["is_p2p"].get<bool>(),
              name.rfind("nccl:send ", 0) == 0 || name.rfind("nccl:recv ", 0) == 0);
    ASSERT_TRUE(e.contains("frames") && e["frames"].is_array());
    for (const auto& f : e["frames"]) {
      EXPECT_TRUE(f.contains("name") && f.contains("filename") && f.contains("line"));
    }
  }
}

// Decodes the pickle at `pickle_path` with Debian's python3 and compares it with the JSON copy
// (tuples as lists; process_group must be a tuple, as c10d writes it). Returns "" on success,
// "skip" without /usr/bin/python3, or what differed.
inline std::string python_pickle_roundtrip(const std::string& pickle_path,
                                           const std::string& json_path) {
  if (!std::filesystem::exists("/usr/bin/python3")) return "skip";
  static const char* kScript = R"PY(
import json, pickle, sys
with open(sys.argv[1], 'rb') as f:
    p = pickle.load(f)
with open(sys.argv[2]) as f:
    j = json.load(f)
def lists(x):
    if isinstance(x, dict): return {k: lists(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [lists(v) for v in x]
    return x
for e in p['entries']:
    if not isinstance(e['process_group'], tuple): sys.exit('process_group is not a tuple')
    if not isinstance(e['record_id'], int) or isinstance(e['record_id'], bool): sys.exit('record_id')
if lists(p) != j: sys.exit('pickle and JSON differ')
print('roundtrip ok', len(p['entries']))
)PY";
  auto r = run_process({"/usr/bin/python3", "-c", kScript, pickle_path, json_path});
  return r.exit_code == 0 ? "" : r.output;
}

}  // namespace fl::test
