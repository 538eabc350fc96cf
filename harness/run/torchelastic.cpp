// torchrun's conventions, the runner's side (torchelastic.hpp).
#include "harness/run/torchelastic.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "base/file_read.hpp"
#include "base/json_bounded.hpp"

namespace fl::harness {

namespace {

nlohmann::json elastic_data(const HistoryEvent& e) {
  auto d = nlohmann::json::parse(e.data_json, nullptr, false);
  return d.is_object() ? d : nlohmann::json::object();
}

// "12345" (ErrorHandler writes the timestamp as a string) or 12345; -1 for anything else.
int64_t timestamp_of(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::isfinite(v.get<double>()))
    return static_cast<int64_t>(v.get<double>());
  if (!v.is_string()) return -1;
  const std::string s = v.get<std::string>();
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), ::isdigit)) return -1;
  return std::stoll(s);
}

std::string last_chars(const std::string& s, size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace

nlohmann::json WorkerError::to_json() const {
  return {{"message", message},
          {"exception", exception},
          {"timestamp", timestamp},
          {"error_code", error_code},
          {"py_callstack", callstack}};
}

std::optional<WorkerError> parse_worker_error(const nlohmann::json& j, std::string* why) {
  auto fail = [&](std::string w) -> std::optional<WorkerError> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  if (!j.is_object() || !j.contains("message")) return fail("no 'message' (not torchelastic's)");
  WorkerError w;
  const auto& m = j["message"];
  if (m.is_string()) {  // the newer format: message and timestamp side by side
    w.message = m.get<std::string>();
    w.timestamp = j.contains("timestamp") ? timestamp_of(j["timestamp"]) : 0;
  } else if (m.is_object()) {
    if (!m.contains("message") || !m["message"].is_string()) {
      return fail("message.message is not a string");
    }
    w.message = m["message"].get<std::string>();
    const auto info = m.value("extraInfo", nlohmann::json::object());
    if (!info.is_object()) return fail("message.extraInfo is not an object");
    w.timestamp = info.contains("timestamp") ? timestamp_of(info["timestamp"]) : 0;
    if (info.contains("py_callstack") && info["py_callstack"].is_string()) {
      w.callstack = last_chars(info["py_callstack"].get<std::string>(), kCallstackChars);
    }
    if (m.contains("errorCode") && m["errorCode"].is_number_integer()) {
      w.error_code = m["errorCode"].get<int>();
    }
  } else {
    return fail("'message' is neither a string nor an object");
  }
  if (w.timestamp < 0) return fail("the timestamp is not a number of seconds");
  w.message = last_chars(w.message, kCallstackChars);
  const size_t colon = w.message.find(':');
  const std::string head = w.message.substr(0, colon);
  // "RuntimeError: ..." names the exception; a message of another shape names none.
  if (colon != std::string::npos && !head.empty() && head.find(' ') == std::string::npos) {
    w.exception = head;
  }
  return w;
}

std::optional<WorkerError> read_worker_error(const std::string& path, std::string* why) {
  JsonLimits limits;
  limits.max_bytes = kErrorFileBytes;
  std::string w;
  const auto j = read_json_file(path, &w, limits);
  if (!j) {
    if (why) *why = w;
    return std::nullopt;
  }
  auto got = parse_worker_error(*j, &w);
  if (!got && why) *why = fmt::format("{}: {}", path, w);
  return got;
}

bool path_inside(const std::string& path, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (!p.is_absolute() || !p.has_filename()) return false;
  const fs::path parent = fs::canonical(p.parent_path(), ec);
  if (ec) return false;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) return false;
  auto [r, q] = std::mismatch(root.begin(), root.end(), parent.begin(), parent.end());
  return r == root.end();
}

std::map<int64_t, std::string> torchrun_closed(const std::vector<HistoryEvent>& history) {
  static const std::string kSending = "Sending process ", kClosing = " closing signal ";
  std::map<int64_t, std::string> out;
  for (const auto& e : history) {
    if (e.source != "harness" || e.kind != "output") continue;
    const std::string line = elastic_data(e).value("line", "");
    const size_t at = line.find(kSending);
    if (at == std::string::npos) continue;
    size_t i = at + kSending.size(), digits = 0;
    while (i + digits < line.size() && std::isdigit(static_cast<unsigned char>(line[i + digits])))
      ++digits;
    if (digits == 0 || digits > 9 || line.compare(i + digits, kClosing.size(), kClosing) != 0)
      continue;
    size_t s = i + digits + kClosing.size(), n = 0;
    while (s + n < line.size() && std::isalnum(static_cast<unsigned char>(line[s + n]))) ++n;
    if (n > 0) out[std::stoll(line.substr(i, digits))] = line.substr(s, n);
  }
  return out;
}

nlohmann::json FirstFailure::to_json() const {
  return {{"rank", rank}, {"how", how}, {"message", message}};
}

namespace {

bool fatal_signal(const std::string& sig) {
  static const std::set<std::string> kFatal = {"SIGKILL", "SIGTERM", "SIGSEGV", "SIGABRT",
                                               "SIGINT"};
  return kFatal.count(sig) > 0;
}

struct Candidate {
  int64_t second;   // torchelastic's resolution: the error file's timestamp
  int64_t unix_ns;  // within that second: when the evidence was stamped (the rank's own error
                    // event, the harness's signal or its seeing the exit; one host's clock)
  uint64_t index;   // the history's order, last
  FirstFailure f;
};

// What the history says about each rank's end: the last rank_exit, its first own error event.
struct RankFacts {
  std::optional<HistoryEvent> exit;
  nlohmann::json exit_data;
  std::optional<HistoryEvent> first_error;
};

}  // namespace

std::optional<FirstFailure> first_failure(const std::vector<HistoryEvent>& history) {
  std::map<int, RankFacts> facts;
  for (const auto& e : history) {
    if (e.rank < 0) continue;
    if (e.source == "harness" && e.kind == "rank_exit") {
      facts[e.rank].exit = e;
      facts[e.rank].exit_data = elastic_data(e);
    } else if (e.source == "rank" && e.kind == "error" && !facts[e.rank].first_error) {
      facts[e.rank].first_error = e;
    }
  }
  auto failed = [&](int r) {
    const auto it = facts.find(r);
    if (it == facts.end() || !it->second.exit) return false;
    const auto& d = it->second.exit_data;
    return d.value("class", "ok") != "ok" && !d.value("by_harness", false) &&
           !d.value("torn_down", false);
  };
  std::vector<Candidate> c;
  std::set<int> explained;
  for (const auto& e : history) {
    if (e.source != "harness" || e.rank < 0 || !failed(e.rank)) continue;
    const auto d = elastic_data(e);
    if (e.kind == "fault_injected" && d.value("fault", "") == "signal" &&
        d.value("delivered", false) && fatal_signal(d.value("signal", ""))) {
      c.push_back({e.time_unix_ns / 1'000'000'000,
                   e.time_unix_ns,
                   e.index,
                   {e.rank, "signal",
                    fmt::format("{} from the scenario's fault at step {}", d.value("signal", ""),
                                d.value("at_step", -1))}});
      explained.insert(e.rank);
    } else if (e.kind == "worker_error" && d.contains("timestamp")) {
      const auto& f = facts[e.rank];
      const HistoryEvent& seen = f.first_error ? *f.first_error : *f.exit;
      c.push_back({d.value("timestamp", int64_t{0}),
                   seen.time_unix_ns,
                   seen.index,
                   {e.rank, "error_file", d.value("message", "")}});
      explained.insert(e.rank);
    }
  }
  for (const auto& [r, f] : facts) {
    if (!failed(r) || explained.count(r)) continue;
    const auto& d = f.exit_data;
    c.push_back(
        {f.exit->time_unix_ns / 1'000'000'000,
         f.exit->time_unix_ns,
         f.exit->index,
         {r, "exit",
          fmt::format("{} ({} {})", d.value("class", ""),
                      d.value("signaled", false) ? "signal" : "exit", d.value("code", 0))}});
  }
  if (c.empty()) return std::nullopt;
  return std::min_element(c.begin(), c.end(),
                          [](const Candidate& a, const Candidate& b) {
                            return std::tie(a.second, a.unix_ns, a.index) <
                                   std::tie(b.second, b.unix_ns, b.index);
                          })
      ->f;
}

}  // namespace fl::harness
