// JUnit XML as CI servers (Jenkins, GitLab, GitHub test reporters) read it: a <testsuites> root
// with totals, one <testsuite> with tests / failures / errors / skipped, timestamp, hostname and
// the suite's wall clock, and per run a <testcase> with <properties>, <system-out> and a
// <failure>, <error> or <skipped> element for its final outcome. The other failed tries of a
// retried case are written as Maven Surefire writes reruns (its surefire-test-report-3.0.xsd):
// <rerunFailure>/<rerunError> when the case finally failed, <flakyFailure>/<flakyError> when it
// passed on a later try, each with message and type and <stackTrace> and <system-out> children,
// in the schema's element order.
#include <filesystem>

#include <fmt/format.h>

#include "base/markup.hpp"
#include "harness/suite/suite.hpp"

namespace fl::harness {

namespace {

// Attribute values by default; element text keeps its tabs and newlines (base/markup.hpp).
std::string xml_escape(const std::string& s, bool attribute = true) {
  return escape_markup(s, attribute ? Markup::kXmlAttribute : Markup::kXmlText);
}

// Jenkins and GitLab split a classname at its dots into packages, so ids keep none:
// "smoke/stage4/4_11", "smoke/clean".
std::string undotted(std::string s) {
  for (auto& ch : s) {
    if (ch == '.') ch = '_';
  }
  return s;
}

std::string classname(const std::string& suite, const SuiteCase& c) {
  if (c.symptom.empty()) return undotted(suite) + "/clean";
  return fmt::format("{}/stage{}/{}", undotted(suite), c.stage, undotted(c.symptom));
}

// pytest's form: local time, no offset (the Ant JUnit schema has none).
std::string junit_timestamp(const std::string& iso) {
  const auto plus = iso.find_first_of("+-", 19);
  return plus == std::string::npos ? iso : iso.substr(0, plus);
}

std::string property(const std::string& name, const std::string& value) {
  return fmt::format("        <property name=\"{}\" value=\"{}\"/>\n", xml_escape(name),
                     xml_escape(value));
}

// A try's kind in Surefire's terms: a failed expectation is a failure, anything else (unknown
// verdict, harness error, interrupted) an error.
bool error_kind(const std::string& outcome) {
  return outcome != "fail";
}

// One earlier failed try of a retried case. Surefire puts a stack trace in <stackTrace>; a run's
// nearest equivalent is its verdict's explanation. <system-out> says where the try's files are.
std::string rerun_element(const std::string& tag, const SuiteAttempt& a, size_t index,
                          size_t tries) {
  return fmt::format(
      "      <{0} message=\"{1}\" type=\"{2}\">\n"
      "        <stackTrace>{3}</stackTrace>\n"
      "        <system-out>try {4} of {5}\nrun directory: {6}\nlog: {6}.log\n</system-out>\n"
      "      </{0}>\n",
      tag, xml_escape(a.outcome + (a.explanation.empty() ? "" : ": " + a.explanation)),
      xml_escape(a.outcome), xml_escape(a.explanation, false), index + 1, tries,
      xml_escape(a.run_dir, false));
}

// The elements that say how a case ended, in the order the schema's sequence wants them:
// failure, rerunFailure*, flakyFailure*, skipped, error, rerunError*, flakyError*.
std::string outcome_elements(const SuiteCase& c) {
  std::string failure, rerun_failures, flaky_failures, skipped, error, rerun_errors, flaky_errors;
  const std::string message = c.outcome + (c.explanation.empty() ? "" : ": " + c.explanation);
  if (c.outcome == "fail") {
    failure = fmt::format("      <failure type=\"fail\" message=\"{}\">{}</failure>\n",
                          xml_escape(message), xml_escape(c.explanation, false));
  } else if (c.outcome == "error" || c.outcome == "unknown" || c.outcome == "interrupted") {
    error =
        fmt::format("      <error type=\"{}\" message=\"{}\">{}</error>\n", xml_escape(c.outcome),
                    xml_escape(message), xml_escape(c.explanation, false));
  } else if (c.outcome == "skipped") {
    skipped = fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(c.explanation));
  }
  // Every try but the last (which the element above, or the pass, stands for).
  const bool flaky = c.outcome == "flaky";
  for (size_t i = 0; i + 1 < c.attempts.size() && (flaky || c.failed()); ++i) {
    const auto& a = c.attempts[i];
    const bool err = error_kind(a.outcome);
    std::string& into =
        flaky ? (err ? flaky_errors : flaky_failures) : (err ? rerun_errors : rerun_failures);
    into += rerun_element(
        flaky ? (err ? "flakyError" : "flakyFailure") : (err ? "rerunError" : "rerunFailure"), a, i,
        c.attempts.size());
  }
  return failure + rerun_failures + flaky_failures + skipped + error + rerun_errors + flaky_errors;
}

// A case of the shards' plan that no merged directory holds: an error of type "missing".
std::string missing_testcase(const std::string& suite, const SuiteCase& c) {
  std::string out = fmt::format(
      "    <testcase classname=\"{}\" name=\"{}\" time=\"0.000\">\n      <properties>\n",
      xml_escape(classname(suite, c)),
      xml_escape(fmt::format("{}{} seed {}", c.name, c.fix ? " [fix]" : "", c.seed)));
  out += property("seed", std::to_string(c.seed));
  out += property("symptom", c.symptom.empty() ? "clean" : c.symptom);
  out += property("variant", c.variant());
  if (!c.shard.empty()) out += property("shard", c.shard);
  out += "      </properties>\n";
  out += fmt::format("      <error type=\"missing\" message=\"{}\">{}</error>\n",
                     xml_escape("missing: " + c.explanation), xml_escape(c.explanation, false));
  return out + "    </testcase>\n";
}

}  // namespace

std::string suite_junit(const SuiteResult& r) {
  const int failures = r.count("fail");
  // A merge's missing cases are errors too: a CI server should show what no shard ran.
  const int errors = r.count("error") + r.count("unknown") + r.count("interrupted") +
                     static_cast<int>(r.missing.size());
  const int skipped = r.count("skipped");
  const size_t tests = r.cases.size() + r.missing.size();
  const std::string commit = r.provenance.commit.empty() ? "unknown" : r.provenance.commit;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\" timestamp=\"{}\">\n",
      xml_escape(r.name), tests, failures, errors, skipped, r.wall_s,
      xml_escape(junit_timestamp(r.provenance.started)));
  out += fmt::format(
      "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\" timestamp=\"{}\" hostname=\"{}\">\n",
      xml_escape(r.name), tests, failures, errors, skipped, r.wall_s,
      xml_escape(junit_timestamp(r.provenance.started)), xml_escape(r.provenance.hostname));
  out += "    <properties>\n";
  out += property("faultline.version", r.provenance.version);
  out += property("commit", commit);
  out += property("flaky", std::to_string(r.count("flaky")));
  out += property("results", r.dir);
  out += property("calibration_gflops", fmt::format("{:.3f}", r.provenance.calibration_median()));
  out += "    </properties>\n";
  for (const auto& c : r.cases) {
    out += fmt::format(
        "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\">\n",
        xml_escape(classname(r.name, c)),
        xml_escape(fmt::format("{}{} seed {}", c.name, c.fix ? " [fix]" : "", c.seed)), c.wall_s);
    out += "      <properties>\n";
    out += property("seed", std::to_string(c.seed));
    out += property("symptom", c.symptom.empty() ? "clean" : c.symptom);
    out += property("variant", c.variant());
    out += property("commit", commit);
    out += property("scenario_file", c.scenario_file);
    out += property("attempts", std::to_string(c.attempts.size()));
    if (c.outcome == "flaky") out += property("flaky", "true");
    if (!c.shard.empty()) out += property("shard", c.shard);
    if (!c.shard_dir.empty()) out += property("shard_dir", c.shard_dir);
    out += "      </properties>\n";
    out += outcome_elements(c);
    if (!c.run_dir.empty()) {
      const std::string report = c.run_dir + "/report.html";
      std::string text = fmt::format(
          "run directory: {}\nlog: {}.log\nreport: {}{}\n", c.run_dir, c.run_dir, report,
          std::filesystem::exists(report) ? "" : " (not written yet: faultline report RUN_DIR)");
      for (size_t i = 0; i + 1 < c.attempts.size(); ++i) {
        text +=
            fmt::format("try {}: {} ({})\n", i + 1, c.attempts[i].outcome, c.attempts[i].run_dir);
      }
      out += fmt::format("      <system-out>{}</system-out>\n", xml_escape(text, false));
    }
    out += "    </testcase>\n";
  }
  for (const auto& c : r.missing) out += missing_testcase(r.name, c);
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

}  // namespace fl::harness
