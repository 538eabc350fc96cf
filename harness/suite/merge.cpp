// Suite results merged (merge.hpp): each directory's summary.json read back into a SuiteResult,
// the directories checked to be one suite and one split, and their cases joined once each, with
// the duplicates and the plan's missing cases accounted for.
#include "harness/suite/merge.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/json_bounded.hpp"
#include "harness/suite/executor.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

namespace {

// A nightly's summary with every shard's plan is larger than an event line; still bounded.
constexpr JsonLimits kSummaryLimits{64, size_t{256} << 20};

constexpr const char* kWhatIsASuiteDir =
    "a suite result directory: the DIR/summary.json that `faultline suite` or `faultline merge` "
    "writes";

constexpr const char* kDuplicateRule =
    "a case held by several directories is kept from the first directory given that holds it";

// `path` under `from` (a summary's recorded directory) moved under `to` (where it is now).
std::string rebased(const std::string& path, const std::string& from, const std::string& to) {
  if (from.empty() || from == to || path.compare(0, from.size(), from) != 0) return path;
  if (path.size() > from.size() && path[from.size()] != '/') return path;
  return to + path.substr(from.size());
}

SuiteAttempt attempt_from(const nlohmann::json& a, const std::string& from, const std::string& to) {
  SuiteAttempt t;
  t.outcome = a.value("outcome", "");
  t.explanation = a.value("explanation", "");
  t.run_dir = rebased(a.value("run_dir", ""), from, to);
  t.wall_s = a.value("wall_s", 0.0);
  t.job = a.value("slurm_task", "");
  return t;
}

// One case of a summary; `where` names it in errors ("DIR/summary.json: cases[3]").
SuiteCase case_from(const nlohmann::json& c, const std::string& where, const std::string& from,
                    const std::string& to) {
  if (!c.is_object() || !c.contains("scenario") || !c["scenario"].is_string() ||
      !c.contains("outcome") || !c["outcome"].is_string()) {
    throw UsageError(
        fmt::format("{}: not a suite case (expected an object with \"scenario\" and "
                    "\"outcome\", as summary.json writes one)",
                    where));
  }
  SuiteCase s;
  s.name = c["scenario"].get<std::string>();
  s.scenario_file = c.value("file", "");
  s.symptom = c.value("symptom", "");
  s.stage = c.value("stage", 0);
  s.seed = c.value("seed", uint64_t{0});
  s.fix = c.value("variant", "faulty") == "fix";
  s.outcome = c["outcome"].get<std::string>();
  s.explanation = c.value("explanation", "");
  s.manifested_s = c.value("manifested_s", -1.0);
  s.wall_s = c.value("wall_s", 0.0);
  s.tokens_per_s = c.value("tokens_per_s", 0.0);
  s.run_dir = rebased(c.value("run_dir", ""), from, to);
  for (const auto& a : c.value("attempts", nlohmann::json::array())) {
    if (a.is_object()) s.attempts.push_back(attempt_from(a, from, to));
  }
  s.shard = c.value("shard", "");
  s.shard_dir = c.value("shard_dir", "");
  return s;
}

Provenance provenance_from(const nlohmann::json& p) {
  Provenance v;
  if (!p.is_object()) return v;
  v.version = p.value("faultline_version", "");
  v.commit = p.value("commit", "");
  v.build_type = p.value("build_type", "");
  v.compiler = p.value("compiler", "");
  v.mpi = p.value("mpi", "");
  v.nccl = p.contains("nccl") && p["nccl"].is_string() ? p["nccl"].get<std::string>() : "";
  v.cores = p.value("cores", 0);
  v.hostname = p.value("hostname", "");
  v.started = p.value("started", "");
  v.load1_start = p.value("load1_start", -1.0);
  v.load1_end = p.value("load1_end", -1.0);
  const auto cal = p.value("calibration", nlohmann::json::object());
  for (const auto& s : cal.value("samples", nlohmann::json::array())) {
    if (!s.is_object()) continue;
    v.calibration.push_back(
        {s.value("at", ""), s.value("finished_runs", 0), s.value("gflops", 0.0)});
  }
  return v;
}

// One directory given to the merge.
struct Shard {
  std::string dir;  // absolute, normalised
  nlohmann::json summary;
  SuiteResult result;
  int index = 0, count = 0;  // --shard I/N; 0/0: not a shard (or a --last-failed rerun of one)

  std::string label() const {
    return count > 0 ? fmt::format("shard {}/{} ({})", index, count, dir) : dir;
  }
  bool in_plan() const { return count > 0; }
};

Shard read_shard(const std::string& given) {
  Shard s;
  s.dir = fs::absolute(given).lexically_normal().string();
  if (s.dir.size() > 1 && s.dir.back() == '/') s.dir.pop_back();
  s.summary = read_suite_dir(given);
  s.result = suite_result_from_summary(s.summary, s.dir);
  const auto sel = s.summary.value("selection", nlohmann::json::object());
  const bool rerun = sel.contains("last_failed") && !sel["last_failed"].is_null();
  if (sel.contains("shard") && sel["shard"].is_string() && !rerun) {
    try {
      parse_shard(sel["shard"].get<std::string>(), s.index, s.count);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}/summary.json: selection.shard: {}", given, e.what()));
    }
  }
  return s;
}

// The selection keys that decide which cases a plan has (not retries, --maxfail, executor).
nlohmann::json plan_filters(const nlohmann::json& summary) {
  const auto sel = summary.value("selection", nlohmann::json::object());
  nlohmann::json out = nlohmann::json::object();
  for (const char* k : {"only", "exclude", "symptom", "stage", "seeds"}) {
    out[k] = sel.contains(k) ? sel[k] : nlohmann::json::array();
  }
  return out;
}

std::vector<std::string> planned_ids(const Shard& s) {
  std::vector<std::string> ids;
  const auto sel = s.summary.value("selection", nlohmann::json::object());
  if (!sel.contains("planned") || !sel["planned"].is_array()) return ids;
  for (const auto& p : sel["planned"]) ids.push_back(p.value("id", ""));
  return ids;
}

// Every directory holds results of one suite; every shard is of one split and one plan.
void check_one_plan(const std::vector<Shard>& shards) {
  const Shard& first = shards.front();
  const Shard* plan = nullptr;
  for (const auto& s : shards) {
    if (s.result.name != first.result.name) {
      throw UsageError(fmt::format(
          "{} holds results of suite '{}', {} of suite '{}': merge joins results of one suite",
          s.dir, s.result.name, first.dir, first.result.name));
    }
    if (!s.in_plan()) continue;
    if (plan == nullptr) {
      plan = &s;
      continue;
    }
    if (s.count != plan->count) {
      throw UsageError(
          fmt::format("{} is shard {}/{}, {} is shard {}/{}: the shards of one split share N",
                      s.dir, s.index, s.count, plan->dir, plan->index, plan->count));
    }
    if (plan_filters(s.summary) != plan_filters(plan->summary)) {
      throw UsageError(fmt::format(
          "{} selected its cases with {}, {} with {}: shards of one plan run with the same "
          "--only, --exclude, --symptom, --stage and --seeds",
          s.dir, plan_filters(s.summary).dump(), plan->dir, plan_filters(plan->summary).dump()));
    }
    const auto a = planned_ids(s), b = planned_ids(*plan);
    if (!a.empty() && !b.empty() && a != b) {
      throw UsageError(fmt::format(
          "{} planned {} cases, {} planned {}{}: shards of different plans (another suite file, "
          "other scenarios or another faultline?)",
          s.dir, a.size(), plan->dir, b.size(),
          a.size() == b.size() ? " (the same count, other cases)" : ""));
    }
  }
}

// The shards' plan as a listed case per id, in plan order (empty: no shard recorded one).
nlohmann::json plan_of(const std::vector<Shard>& shards) {
  for (const auto& s : shards) {
    if (!s.in_plan()) continue;
    const auto sel = s.summary.value("selection", nlohmann::json::object());
    if (sel.contains("planned") && sel["planned"].is_array()) return sel["planned"];
  }
  return nlohmann::json::array();
}

// The merged provenance: the earliest shard's, with every shard's calibration samples and every
// machine's name.
Provenance merged_provenance(const std::vector<Shard>& shards) {
  const Shard* earliest = &shards.front();
  for (const auto& s : shards) {
    if (s.result.provenance.started < earliest->result.provenance.started) earliest = &s;
  }
  Provenance p = earliest->result.provenance;
  p.calibration.clear();
  std::vector<std::string> hosts;
  for (const auto& s : shards) {
    const auto& q = s.result.provenance;
    p.calibration.insert(p.calibration.end(), q.calibration.begin(), q.calibration.end());
    if (std::find(hosts.begin(), hosts.end(), q.hostname) == hosts.end()) {
      hosts.push_back(q.hostname);
    }
  }
  p.hostname = fmt::format("{}", fmt::join(hosts, ", "));
  return p;
}

nlohmann::json shard_entry(const Shard& s) {
  const auto& p = s.result.provenance;
  return {{"dir", s.dir},
          {"shard", s.count > 0 ? nlohmann::json(fmt::format("{}/{}", s.index, s.count))
                                : nlohmann::json(nullptr)},
          {"runs", s.result.cases.size()},
          {"wall_s", s.result.wall_s},
          {"hostname", p.hostname},
          {"commit", p.commit},
          {"started", p.started},
          {"interrupted", s.result.interrupted}};
}

// Joins the shards' cases: each id once, from the first directory that holds it.
class CaseJoin {
 public:
  void add(const Shard& s) {
    for (SuiteCase c : s.result.cases) {
      if (s.in_plan()) c.shard = fmt::format("{}/{}", s.index, s.count);
      if (c.shard_dir.empty()) c.shard_dir = s.dir;
      const std::string id = c.id();
      auto it = where_.find(id);
      if (it == where_.end()) {
        where_[id] = cases_.size();
        cases_.push_back(std::move(c));
        continue;
      }
      duplicate(cases_[it->second], c);
    }
  }
  bool holds(const std::string& id) const { return where_.count(id) > 0; }
  std::vector<SuiteCase>& cases() { return cases_; }
  nlohmann::json duplicates() const {
    nlohmann::json out = nlohmann::json::array();
    for (auto [id, d] : duplicates_) {
      d["detail"] = fmt::format("{}: in {}; kept the copy from {} (the first directory given)",
                                d["case"].get<std::string>(), places_.at(id),
                                d["kept"]["shard_dir"].get<std::string>());
      out.push_back(d);
    }
    return out;
  }

 private:
  static nlohmann::json copy_of(const SuiteCase& c) {
    return {{"shard", c.shard},
            {"shard_dir", c.shard_dir},
            {"outcome", c.outcome},
            {"run_dir", c.run_dir}};
  }
  static std::string where(const SuiteCase& c) {
    return fmt::format("{} ({}{})", c.shard_dir, c.shard.empty() ? "" : "shard " + c.shard + ", ",
                       c.outcome);
  }
  void duplicate(const SuiteCase& kept, const SuiteCase& dropped) {
    const std::string id = kept.id();
    auto& d = duplicates_[id];
    if (d.is_null()) {
      d = {{"id", id},
           {"case", case_label(kept)},
           {"kept", copy_of(kept)},
           {"dropped", nlohmann::json::array()}};
      places_[id] = where(kept);
    }
    d["dropped"].push_back(copy_of(dropped));
    places_[id] += " and " + where(dropped);
  }

  std::vector<SuiteCase> cases_;
  std::map<std::string, size_t> where_;
  std::map<std::string, nlohmann::json> duplicates_;
  std::map<std::string, std::string> places_;  // id -> "DIR (shard 1/3, pass) and DIR2 (...)"
};

}  // namespace

nlohmann::json read_suite_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    throw UsageError(fmt::format("{}: no such directory (expected {})", dir, kWhatIsASuiteDir));
  }
  if (!fs::is_directory(dir, ec)) {
    throw UsageError(fmt::format("{}: not a directory (expected {})", dir, kWhatIsASuiteDir));
  }
  const std::string path = (fs::path(dir) / "summary.json").string();
  if (!fs::exists(path, ec)) {
    throw UsageError(fmt::format(
        "{}: no summary.json, so not {} (a suite killed before its end writes none: leave the "
        "directory out and the merge reports its shard's cases missing)",
        dir, kWhatIsASuiteDir));
  }
  std::string why;
  auto j = read_json_file(path, &why, kSummaryLimits);
  if (!j) throw UsageError(fmt::format("{} (expected {})", why, kWhatIsASuiteDir));
  if (!j->is_object() || !j->contains("suite") || !(*j)["suite"].is_string() ||
      !j->contains("cases") || !(*j)["cases"].is_array()) {
    throw UsageError(fmt::format(
        "{}: not a suite summary (expected an object with \"suite\" and a \"cases\" list)", path));
  }
  return std::move(*j);
}

SuiteResult suite_result_from_summary(const nlohmann::json& summary, const std::string& dir) {
  SuiteResult r;
  r.name = summary.value("suite", "");
  r.dir = dir;
  const std::string from = summary.value("dir", "");
  const auto& cases = summary["cases"];
  for (size_t i = 0; i < cases.size(); ++i) {
    r.cases.push_back(
        case_from(cases[i], fmt::format("{}/summary.json: cases[{}]", dir, i), from, dir));
  }
  r.wall_s = summary.value("wall_s", 0.0);
  r.provenance = provenance_from(summary.value("provenance", nlohmann::json::object()));
  r.selection = summary.value("selection", nlohmann::json::object());
  r.interrupted = summary.value("interrupted", "");
  for (const auto& n : summary.value("notes", nlohmann::json::array())) {
    if (n.is_string()) r.notes.push_back(n.get<std::string>());
  }
  return r;
}

namespace {

std::vector<Shard> read_shards(const std::vector<std::string>& dirs) {
  if (dirs.empty()) throw UsageError("merge: no suite directory given");
  std::vector<Shard> shards;
  std::set<std::string> seen;
  for (const auto& d : dirs) {
    shards.push_back(read_shard(d));
    if (!seen.insert(shards.back().dir).second) {
      throw UsageError(fmt::format("{}: given twice (each suite directory once)", d));
    }
  }
  check_one_plan(shards);
  return shards;
}

// The cases of the plan no directory holds, and the shards no directory was given for.
void account_missing(const std::vector<Shard>& shards, CaseJoin& join, SuiteResult& r) {
  int count = 0;
  std::set<int> present;
  for (const auto& s : shards) {
    if (!s.in_plan()) continue;
    count = s.count;
    present.insert(s.index);
  }
  nlohmann::json absent = nlohmann::json::array();
  for (int i = 1; i <= count; ++i) {
    if (!present.count(i)) absent.push_back(fmt::format("{}/{}", i, count));
  }
  r.merge["absent_shards"] = absent;
  const nlohmann::json plan = plan_of(shards);
  if (count > 0 && plan.empty() && !absent.empty()) {
    r.notes.push_back(fmt::format(
        "shard{} {} given no directory, and the shards' summaries record no plan "
        "(selection.planned, written by faultline since the merge command): its cases cannot be "
        "named",
        absent.size() == 1 ? "" : "s", fmt::join(absent, ", ")));
  }
  nlohmann::json missing = nlohmann::json::array();
  for (const auto& p : plan) {
    const std::string id = p.value("id", "");
    if (join.holds(id)) continue;
    SuiteCase m;
    m.name = p.value("scenario", "");
    m.scenario_file = p.value("file", "");
    m.symptom = p.value("symptom", "");
    m.stage = p.value("stage", 0);
    m.seed = p.value("seed", uint64_t{0});
    m.fix = p.value("variant", "faulty") == "fix";
    const int shard = shard_of(id, count) + 1;
    m.shard = fmt::format("{}/{}", shard, count);
    m.outcome = "missing";
    m.explanation = present.count(shard)
                        ? fmt::format("not in shard {}'s results, though its plan has it", m.shard)
                        : fmt::format("shard {} is not among the merged directories", m.shard);
    missing.push_back({{"id", id},
                       {"scenario", m.name},
                       {"variant", m.variant()},
                       {"seed", m.seed},
                       {"symptom", m.symptom},
                       {"shard", m.shard},
                       {"why", m.explanation}});
    r.missing.push_back(std::move(m));
  }
  r.merge["missing"] = missing;
}

// Cases in plan order; cases outside the plan after them, in the order they were read.
void order_by_plan(std::vector<SuiteCase>& cases, const nlohmann::json& plan) {
  std::map<std::string, size_t> rank;
  for (size_t i = 0; i < plan.size(); ++i) rank[plan[i].value("id", "")] = i;
  std::stable_sort(cases.begin(), cases.end(), [&](const SuiteCase& a, const SuiteCase& b) {
    auto ra = rank.find(a.id()), rb = rank.find(b.id());
    return (ra == rank.end() ? plan.size() : ra->second) <
           (rb == rank.end() ? plan.size() : rb->second);
  });
}

void merge_notes(const std::vector<Shard>& shards, SuiteResult& r) {
  std::set<std::string> commits;
  for (const auto& s : shards) {
    for (const auto& n : s.result.notes) {
      if (std::find(r.notes.begin(), r.notes.end(), n) == r.notes.end()) r.notes.push_back(n);
    }
    commits.insert(s.result.provenance.commit);
    if (r.interrupted.empty() && !s.result.interrupted.empty()) {
      r.interrupted = fmt::format("{} ({})", s.result.interrupted, s.label());
    }
  }
  if (commits.size() > 1) {
    std::vector<std::string> each;
    for (const auto& s : shards) each.push_back(s.result.provenance.commit + " in " + s.dir);
    r.notes.push_back(
        fmt::format("the directories ran different commits: {}", fmt::join(each, ", ")));
  }
}

}  // namespace

SuiteResult merge_suite_dirs(const std::vector<std::string>& dirs) {
  const std::vector<Shard> shards = read_shards(dirs);
  SuiteResult r;
  r.name = shards.front().result.name;
  r.merge = {{"rule", kDuplicateRule}, {"shards", nlohmann::json::array()}};
  CaseJoin join;
  for (const auto& s : shards) {
    join.add(s);
    r.merge["shards"].push_back(shard_entry(s));
    r.wall_s = std::max(r.wall_s, s.result.wall_s);
  }
  account_missing(shards, join, r);
  r.merge["duplicates"] = join.duplicates();
  const nlohmann::json plan = plan_of(shards);
  r.merge["planned"] = plan.size();
  r.cases = std::move(join.cases());
  order_by_plan(r.cases, plan);
  r.provenance = merged_provenance(shards);
  r.selection = shards.front().result.selection;
  r.selection["shard"] = nullptr;
  r.selection["planned"] = plan.empty() ? nlohmann::json(nullptr) : plan;
  merge_notes(shards, r);
  return r;
}

}  // namespace fl::harness
