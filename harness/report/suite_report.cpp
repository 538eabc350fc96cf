// The report of a suite: the catalogue as a grid (stage x symptom) coloured by what the suite
// saw for each symptom — reproduced and fix verified, reproduced but a fix failed, not
// reproduced — with the median time to symptom; every run with its outcome; the detector
// leaderboard when the suite was a benchmark.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.hpp"
#include "base/json_bounded.hpp"
#include "base/stats.hpp"
#include "harness/model/scenario.hpp"
#include "harness/report/html.hpp"
#include "harness/report/report.hpp"
#include "harness/run/runner.hpp"
#include "harness/suite/merge.hpp"

namespace fl::harness {

namespace fs = std::filesystem;

std::string run_report_html(const std::string& run_dir, const std::string& out_dir);

namespace {

struct Cell {
  int faulty = 0, reproduced = 0, fixes = 0, fixed = 0;
  std::vector<double> t;
  std::vector<std::string> scenarios;
};

// A flaky case passed on a retry; skipped cases did not run and count for nothing.
bool passed(const nlohmann::json& c) {
  const std::string o = c.value("outcome", "");
  return o == "pass" || o == "flaky";
}

// Which binary on which machine in which state: the suite's provenance (docs/catalog.md).
std::string provenance_html(const nlohmann::json& p) {
  if (!p.is_object()) return "";
  auto row = [](const std::string& k, const std::string& v) {
    return fmt::format("<tr><th>{}</th><td>{}</td></tr>", html_escape(k), html_escape(v));
  };
  auto load = [&](const char* k) {
    return p.contains(k) && p[k].is_number() && p[k].get<double>() >= 0
               ? html::num(p[k].get<double>(), 2)
               : std::string("?");
  };
  const auto cal = p.value("calibration", nlohmann::json::object());
  std::string samples;
  for (const auto& x : cal.value("samples", nlohmann::json::array())) {
    samples += (samples.empty() ? "" : ", ") + html::num(x.value("gflops", 0.0), 2);
  }
  std::string s = "<h2>Provenance</h2><table id=\"provenance\">";
  s += row("faultline", fmt::format("{} ({}, {})", p.value("faultline_version", "?"),
                                    p.value("commit", "?"), p.value("build_type", "?")));
  s += row("compiler", p.value("compiler", "?"));
  s += row("MPI", p.value("mpi", "?"));
  s += row("NCCL", p.contains("nccl") && p["nccl"].is_string() ? p["nccl"].get<std::string>()
                                                               : "not built");
  s += row("machine", fmt::format("{}, {} cores", p.value("hostname", "?"), p.value("cores", 0)));
  s += row("started", p.value("started", "?"));
  s += row("load (1 min)",
           fmt::format("{} at start, {} at end", load("load1_start"), load("load1_end")));
  s += row("calibration",
           fmt::format("{} GFLOP/s median ({}: {})", html::num(cal.value("gflops", 0.0), 2),
                       cal.value("method", "?"), samples));
  return s + "</table>\n";
}

// "77% [69-83] 99/128": a share, its 95% interval (from the leaderboard) and its counts.
std::string share_cell(const nlohmann::json& d, const char* value, const char* ci, int k, int n) {
  if (n == 0) return "- <small>0/0</small>";
  const auto& i = d.contains(ci) ? d[ci] : nlohmann::json();
  const std::string range =
      i.is_array() && i.size() == 2
          ? fmt::format(" [{:.0f}-{:.0f}]", 100 * i[0].get<double>(), 100 * i[1].get<double>())
          : "";
  return fmt::format("{:.0f}%{} <small>{}/{}</small>", 100 * d.value(value, 0.0), range, k, n);
}

std::string leaderboard_row(const nlohmann::json& d) {
  const auto& lat = d["latency_from_injection_s"];
  const auto& f1 = d.contains("f1_ci95") ? d["f1_ci95"] : nlohmann::json();
  const auto& fph = d.contains("false_positives_per_clean_hour_ci95")
                        ? d["false_positives_per_clean_hour_ci95"]
                        : nlohmann::json();
  const int tp = d.value("true_positives", 0);
  return fmt::format(
      "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2f}{} <small>n={}</small></td><td>{} "
      "<small>n={}</small></td><td>{:.0f}% <small>{}/{}</small></td><td>{:.0f}% "
      "<small>n={}</small></td><td>{:.0f}{} <small>{} in {:.3f} h</small></td></tr>\n",
      html_escape(d.value("detector", "")),
      share_cell(d, "recall", "recall_ci95", tp, d.value("positives", 0)),
      share_cell(d, "precision", "precision_ci95", tp, tp + d.value("false_positive_runs", 0)),
      d.value("f1", 0.0),
      f1.is_array() ? fmt::format(" [{:.2f}-{:.2f}]", f1[0].get<double>(), f1[1].get<double>())
                    : "",
      d.value("positives", 0) + d.value("negatives", 0),
      lat["p50"].is_number() ? html::num(lat["p50"].get<double>(), 2) : "-", lat.value("n", 0),
      100 * d.value("symptom_accuracy", 0.0),
      static_cast<int>(std::lround(d.value("symptom_accuracy", 0.0) * d.value("symptom_n", 0))),
      d.value("symptom_n", 0), 100 * d.value("localisation_top1", 0.0),
      d.value("localised_runs", 0), d.value("false_positives_per_clean_hour", 0.0),
      fph.is_array() ? fmt::format(" [{:.0f}-{:.0f}]", fph[0].get<double>(), fph[1].get<double>())
                     : "",
      d.value("false_alarms_on_clean_runs", 0), d.value("clean_hours", 0.0));
}

std::string leaderboard_html(const nlohmann::json& lb) {
  std::string s =
      "<h2>Detector leaderboard</h2><table id=\"leaderboard\"><tr><th>detector</th>"
      "<th>recall</th><th>precision</th><th>F1</th><th>latency p50 s</th><th>symptom</th>"
      "<th>top-1</th><th>FP / clean h</th></tr>\n";
  for (const auto& d : lb.value("detectors", nlohmann::json::array())) s += leaderboard_row(d);
  return s +
         "</table><p class=\"meta\">[95% interval]: Wilson for recall and precision, percentile "
         "bootstrap over runs for F1, exact Poisson for false alarms per clean hour; every cell "
         "gives the counts behind it.</p>\n" +
         sweep_curves_html(lb);
}

// What the suite saw, per symptom and in all.
struct Tally {
  std::map<std::string, Cell> cells;
  int failed = 0, skipped = 0, flaky = 0;
};

Tally tally(const nlohmann::json& cases) {
  Tally t;
  for (const auto& c : cases) {
    const std::string sym = c.value("symptom", "");
    const std::string outcome = c.value("outcome", "");
    if (outcome == "skipped") {
      ++t.skipped;
      continue;
    }
    t.flaky += outcome == "flaky" ? 1 : 0;
    if (!passed(c)) ++t.failed;
    if (sym.empty()) continue;
    Cell& cell = t.cells[sym];
    const bool pass = passed(c);
    if (c.value("variant", "") == "fix") {
      ++cell.fixes;
      cell.fixed += pass;
    } else {
      ++cell.faulty;
      cell.reproduced += pass;
      if (pass && c.value("manifested_s", -1.0) >= 0) cell.t.push_back(c["manifested_s"]);
      const std::string n = c.value("scenario", "");
      if (std::find(cell.scenarios.begin(), cell.scenarios.end(), n) == cell.scenarios.end()) {
        cell.scenarios.push_back(n);
      }
    }
  }
  return t;
}

// The catalogue's grid: a row per stage, a cell per symptom coloured by what the suite saw.
std::string catalogue_html(const std::map<std::string, Cell>& cells) {
  std::string body =
      "<h2>Catalogue</h2><div class=\"legend\"><span class=\"cell ok\">reproduced, fix "
      "verified</span><span class=\"cell fixfail\">reproduced, a fix failed</span><span "
      "class=\"cell norepro\">not reproduced</span><span class=\"cell none\">no scenario in "
      "this suite</span></div><table id=\"catalog\">\n";
  const Taxonomy& tax = taxonomy();
  for (int stage = 1; stage <= 5; ++stage) {
    body += fmt::format("<tr><th>stage {}</th>", stage);
    for (const auto& s : tax.symptoms) {
      if (s.stage != stage) continue;
      auto it = cells.find(s.id);
      std::string cls = "none", info;
      if (it != cells.end() && it->second.faulty > 0) {
        const Cell& c = it->second;
        cls = c.reproduced < c.faulty ? "norepro" : c.fixed < c.fixes ? "fixfail" : "ok";
        info = fmt::format(
            "{}/{} reproduced, {}/{} fixed{}", c.reproduced, c.faulty, c.fixed, c.fixes,
            c.t.empty() ? "" : fmt::format(", {:.1f} s to symptom", stats::upper_median(c.t)));
      }
      body += fmt::format(
          "<td class=\"cell {}\" data-symptom=\"{}\" title=\"{}\"><b>{}</b> {}<br>{}</td>", cls,
          s.id,
          html_escape(it != cells.end() ? fmt::format("{}", fmt::join(it->second.scenarios, ", "))
                                        : ""),
          s.id, html_escape(s.name), html_escape(info));
    }
    body += "</tr>\n";
  }
  return body + "</table>\n";
}

// Every run with its outcome, linked to its report (or its directory) relative to `out_dir`.
std::string runs_html(const nlohmann::json& cases, const std::string& out_dir) {
  std::string body =
      "<h2>Runs</h2><table id=\"runs\"><tr><th>scenario</th><th>variant</th><th>seed</th>"
      "<th>outcome</th><th>time to symptom</th><th>tokens/s</th><th>explanation</th></tr>\n";
  for (const auto& c : cases) {
    const std::string dir = c.value("run_dir", "");
    const std::string link =
        !dir.empty() && fs::exists(dir + "/report.html")
            ? fs::relative(fs::path(dir) / "report.html", out_dir).string()
            : (!dir.empty() && fs::exists(dir) ? fs::relative(dir, out_dir).string() : "");
    const double m = c.value("manifested_s", -1.0);
    body += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{:.0f}</td>"
        "<td>{}</td></tr>\n",
        link.empty() ? html_escape(c.value("scenario", ""))
                     : fmt::format("<a href=\"{}\">{}</a>", html_escape(link),
                                   html_escape(c.value("scenario", ""))),
        c.value("variant", ""), c.value("seed", 0),
        passed(c) || c.value("outcome", "") == "skipped" ? "" : "fail",
        html_escape(c.value("outcome", "")), m >= 0 ? html::num(m, 1) + " s" : "-",
        c.value("tokens_per_s", 0.0), html_escape(c.value("explanation", "")));
  }
  return body + "</table>\n";
}

// A merged result (faultline merge): the directories it joined, the cases two of them held and
// the cases of the plan none held.
std::string merge_html(const nlohmann::json& m) {
  if (!m.is_object()) return "";
  std::string s =
      "<h2>Merged shards</h2><table id=\"shards\"><tr><th>shard</th><th>directory</th>"
      "<th>host</th><th>runs</th><th>wall s</th></tr>\n";
  for (const auto& d : m.value("shards", nlohmann::json::array())) {
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     d["shard"].is_string() ? html_escape(d["shard"].get<std::string>()) : "-",
                     html_escape(d.value("dir", "")), html_escape(d.value("hostname", "")),
                     d.value("runs", 0), html::num(d.value("wall_s", 0.0), 1));
  }
  s += "</table>\n";
  for (const auto& a : m.value("absent_shards", nlohmann::json::array())) {
    s += fmt::format("<p class=\"fail\">shard {}: no directory was given for it</p>\n",
                     html_escape(a.get<std::string>()));
  }
  const auto missing = m.value("missing", nlohmann::json::array());
  if (!missing.empty()) {
    s += "<h3>Missing cases</h3><table id=\"missing\"><tr><th>case</th><th>shard</th>"
         "<th>why</th></tr>\n";
    for (const auto& c : missing) {
      s += fmt::format("<tr><td>{}</td><td>{}</td><td class=\"fail\">{}</td></tr>\n",
                       html_escape(c.value("id", "")), html_escape(c.value("shard", "")),
                       html_escape(c.value("why", "")));
    }
    s += "</table>\n";
  }
  const auto dups = m.value("duplicates", nlohmann::json::array());
  if (!dups.empty()) {
    s += fmt::format("<h3>Duplicates</h3><p>{}</p><ul id=\"duplicates\">\n",
                     html_escape(m.value("rule", "")));
    for (const auto& d : dups) s += "<li>" + html_escape(d.value("detail", "")) + "</li>\n";
    s += "</ul>\n";
  }
  return s;
}

// The page of a summary; `where` is shown under the title, `suite_dir` may hold a leaderboard.
std::string suite_page(const nlohmann::json& sum, const std::string& where,
                       const std::string& suite_dir, const std::string& out_dir) {
  const Tally t = tally(sum["cases"]);
  const size_t ran = sum["cases"].size() - t.skipped;
  const size_t missing =
      sum.value("merge", nlohmann::json::object()).value("missing", nlohmann::json::array()).size();
  std::string body = fmt::format(
      "<h1>suite {} <span class=\"badge {}\">{} of {} runs passed</span></h1>\n"
      "<div class=\"meta\">{}{}{}{}</div>\n",
      html_escape(sum.value("suite", "")), t.failed == 0 && missing == 0 ? "pass" : "fail",
      ran - t.failed, ran,
      t.flaky > 0 ? fmt::format("{} flaky (passed on a retry); ", t.flaky) : "",
      t.skipped > 0 ? fmt::format("{} skipped; ", t.skipped) : "",
      missing > 0 ? fmt::format("{} missing (no shard ran them); ", missing) : "",
      html_escape(where));
  body += catalogue_html(t.cells);
  const fs::path lb = fs::path(suite_dir) / "leaderboard.json";
  if (!suite_dir.empty() && fs::exists(lb)) {
    if (auto j = read_json_file(lb.string())) body += leaderboard_html(*j);
  }
  body += merge_html(sum.value("merge", nlohmann::json()));
  body += runs_html(sum["cases"], out_dir);
  body += provenance_html(sum.value("provenance", nlohmann::json()));
  return html::page("faultline suite " + sum.value("suite", ""), body);
}

}  // namespace

std::string suite_report_html(const std::string& suite_dir, const std::string& out_dir) {
  return suite_page(load_suite_summary(suite_dir), suite_dir, suite_dir, out_dir);
}

std::string write_merged_report(const std::vector<std::string>& dirs, const std::string& out) {
  SuiteResult r = merge_suite_dirs(dirs);
  const std::string out_dir = fs::absolute(fs::path(out)).parent_path().string();
  write_atomic(out,
               suite_page(suite_json(r), fmt::format("{}", fmt::join(dirs, ", ")), "", out_dir));
  return out;
}

nlohmann::json load_suite_summary(const std::string& path) {
  const fs::path p = fs::is_directory(path) ? fs::path(path) / "summary.json" : fs::path(path);
  if (!fs::exists(p))
    raise<Error>("{}: no suite summary (expected a suite directory or its summary.json)", path);
  std::string why;
  auto parsed = read_json_file(p.string(), &why);
  if (!parsed) raise<Error>("{}", why);  // not a regular file, too big, too deep, not JSON
  auto j = std::move(*parsed);
  if (!j.is_object() || !j.contains("cases") || !j["cases"].is_array()) {
    raise<Error>("{}: not a suite summary (no \"cases\" list)", p.string());
  }
  return j;
}

std::string write_report(const std::string& dir, const std::string& out) {
  const bool run = fs::exists(fs::path(dir) / "history.jsonl");
  const bool suite = fs::exists(fs::path(dir) / "summary.json");
  if (!run && !suite) {
    raise<Error>(
        "{}: neither a run directory (history.jsonl) nor a suite directory "
        "(summary.json)",
        dir);
  }
  const std::string path = out.empty() ? (fs::path(dir) / "report.html").string() : out;
  const std::string out_dir = fs::absolute(fs::path(path)).parent_path().string();
  const std::string abs = fs::absolute(dir).lexically_normal().string();
  write_atomic(path, run ? run_report_html(abs, out_dir) : suite_report_html(abs, out_dir));
  return path;
}

}  // namespace fl::harness
