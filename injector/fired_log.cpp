// The fired log: reading it back and turning it into a replay plan (see plan.hpp).
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/file_read.hpp"
#include "base/json_bounded.hpp"
#include "injector/plan.hpp"

namespace fl::fault {

namespace {
constexpr uint64_t kMaxFiredLogBytes = uint64_t{256} << 20;  // a record per firing, ~150 bytes
}  // namespace

std::string replay_plan(const std::vector<FiredRecord>& records) {
  std::string out;
  for (const auto& r : records) {
    if (!out.empty()) out += ";";
    out += fmt::format("{}[rank={},eval={}]={}", r.site, r.rank, r.eval, r.action);
  }
  return out;
}

std::vector<FiredRecord> read_fired_log(const std::string& path) {
  // A rank wrote it: a FIFO in its place is refused, not waited on, and each line is parsed
  // with the depth and size limits of base/json_bounded.hpp.
  std::string text;
  try {
    text = read_regular_file(path, kMaxFiredLogBytes);
  } catch (const Error& e) {
    raise<Error>("cannot read fired log {}", e.what());
  }
  std::istringstream in(text);
  std::vector<FiredRecord> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const auto j = try_parse_json_bounded(line).value_or(nlohmann::json());
    if (!j.is_object()) {
      if (in.peek() == EOF) break;  // torn last line of a killed process
      raise<Error>("{}:{}: not a fired-log record (one JSON object per line)", path, n);
    }
    FiredRecord r;
    r.site = j.value("site", "");
    r.rank = j.value("rank", -1);
    r.step = j.value("step", int64_t{-1});
    r.seq = j.value("seq", int64_t{-1});
    r.hit = j.value("hit", uint64_t{0});
    r.eval = j.value("eval", uint64_t{0});
    r.action = j.value("action", "");
    if (r.site.empty() || r.action.empty()) {
      raise<Error>("{}:{}: fired-log record without 'site' or 'action'", path, n);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace fl::fault
