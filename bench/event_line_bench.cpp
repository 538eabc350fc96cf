// The event's JSON lines (base/event.hpp): the one writer against the two ways it could have been
// written instead, in the same run: the fmt format strings the worker and the history used
// before they shared it, and a line built as a nlohmann::ordered_json (which has to parse the
// data, already JSON text, on every line). A worker writes one rank line per event under its file
// lock, the harness one history line per event under the history's lock; the parser runs only
// when a file is read back. docs/benchmarks.md has the numbers.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/event.hpp"
#include "base/json_bounded.hpp"

namespace {

fl::Event sample() {
  fl::Event e;
  e.index = 123456;
  e.t_ns = 98765432100;
  e.source = "rank";
  e.rank = 3;
  e.seq = 4242;
  e.time_unix_ns = 1764037000123456789;
  e.kind = "collective";
  e.step = 17;
  e.data_json =
      R"({"count":4096,"dtype":"fp32","group":"dp","op":"all_reduce","peer":-1,"seq":12,"state":"completed"})";
  return e;
}

void BM_RankLine(benchmark::State& st) {
  fl::Event e = sample();
  for (auto _ : st) {
    ++e.seq;
    benchmark::DoNotOptimize(fl::to_json_line(e, fl::EventLine::kRank));
  }
}
BENCHMARK(BM_RankLine);

void BM_HistoryLine(benchmark::State& st) {
  fl::Event e = sample();
  for (auto _ : st) {
    ++e.index;
    benchmark::DoNotOptimize(fl::to_json_line(e, fl::EventLine::kHistory));
  }
}
BENCHMARK(BM_HistoryLine);

// The worker's format string before the writer was shared (kind not escaped).
void BM_RankLineFmtBefore(benchmark::State& st) {
  fl::Event e = sample();
  for (auto _ : st) {
    ++e.seq;
    benchmark::DoNotOptimize(fmt::format(
        "{{\"rank\":{},\"seq\":{},\"time_unix_ns\":{},\"kind\":\"{}\",\"step\":{},\"data\":{}}}\n",
        e.rank, e.seq, e.time_unix_ns, e.kind, e.step, e.data_json));
  }
}
BENCHMARK(BM_RankLineFmtBefore);

// The history's format string before (source and kind escaped by nlohmann).
void BM_HistoryLineFmtBefore(benchmark::State& st) {
  fl::Event e = sample();
  for (auto _ : st) {
    ++e.index;
    benchmark::DoNotOptimize(fmt::format(
        "{{\"i\":{},\"t_ns\":{},\"source\":{},\"rank\":{},\"seq\":{},\"time_unix_ns\":{},"
        "\"kind\":{},\"step\":{},\"data\":{}{}}}\n",
        e.index, e.t_ns, nlohmann::json(e.source).dump(), e.rank, e.seq, e.time_unix_ns,
        nlohmann::json(e.kind).dump(), e.step, e.data_json, e.late ? ",\"late\":true" : ""));
  }
}
BENCHMARK(BM_HistoryLineFmtBefore);

nlohmann::ordered_json envelope(const fl::Event& e, bool history) {
  nlohmann::ordered_json j;
  if (history) {
    j["i"] = e.index;
    j["t_ns"] = e.t_ns;
    j["source"] = e.source;
  }
  j["rank"] = e.rank;
  j["seq"] = e.seq;
  j["time_unix_ns"] = e.time_unix_ns;
  j["kind"] = e.kind;
  j["step"] = e.step;
  return j;
}

// The same bytes built with nlohmann: the data text parsed into the document first.
void BM_RankLineNlohmann(benchmark::State& st) {
  fl::Event e = sample();
  for (auto _ : st) {
    ++e.seq;
    auto j = envelope(e, false);
    j["data"] = nlohmann::ordered_json::parse(e.data_json);
    benchmark::DoNotOptimize(j.dump() + "\n");
  }
}
BENCHMARK(BM_RankLineNlohmann);

void BM_HistoryLineNlohmann(benchmark::State& st) {
  fl::Event e = sample();
  for (auto _ : st) {
    ++e.index;
    auto j = envelope(e, true);
    j["data"] = nlohmann::ordered_json::parse(e.data_json);
    if (e.late) j["late"] = true;
    benchmark::DoNotOptimize(j.dump() + "\n");
  }
}
BENCHMARK(BM_HistoryLineNlohmann);

void BM_ParseHistoryLine(benchmark::State& st) {
  const std::string line = fl::to_json_line(sample(), fl::EventLine::kHistory);
  for (auto _ : st) {
    benchmark::DoNotOptimize(fl::parse_json_line(line, fl::EventLine::kHistory));
  }
}
BENCHMARK(BM_ParseHistoryLine);

void BM_ParseRankLine(benchmark::State& st) {
  const std::string line = fl::to_json_line(sample(), fl::EventLine::kRank);
  for (auto _ : st) {
    benchmark::DoNotOptimize(fl::parse_json_line(line, fl::EventLine::kRank));
  }
}
BENCHMARK(BM_ParseRankLine);

// The bounded parse (base/json_bounded.hpp) against nlohmann's parse of the same history line,
// and against the other way of bounding it: a scan of bracket depth outside strings first.
const std::string& history_line() {
  static const std::string line = fl::to_json_line(sample(), fl::EventLine::kHistory);
  return line;
}

void BM_JsonParseNlohmann(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(nlohmann::json::parse(history_line()));
}
BENCHMARK(BM_JsonParseNlohmann);

void BM_JsonParseBounded(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(fl::parse_json_bounded(history_line()));
}
BENCHMARK(BM_JsonParseBounded);

bool depth_at_most(std::string_view s, size_t max) {
  size_t d = 0;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++d > max) return false;
    } else if ((c == ']' || c == '}') && d > 0) {
      --d;
    }
  }
  return true;
}

void BM_JsonParsePrescanned(benchmark::State& st) {
  for (auto _ : st) {
    if (depth_at_most(history_line(), 64)) {
      benchmark::DoNotOptimize(nlohmann::json::parse(history_line()));
    }
  }
}
BENCHMARK(BM_JsonParsePrescanned);

}  // namespace
