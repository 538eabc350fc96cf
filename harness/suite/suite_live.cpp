// A running suite's live series (suite_live.hpp).
#include "harness/suite/suite_live.hpp"

#include <cstdio>
#include <map>

#include "base/control_auth.hpp"
#include "harness/run/runner.hpp"

namespace fl::harness {

SuiteLive::SuiteLive(const SuiteResult& res)
    : suite_(res.name),
      commit_(res.provenance.commit),
      host_(res.provenance.hostname),
      started_(res.provenance.started),
      t0_(std::chrono::steady_clock::now()) {
  for (const auto& c : res.cases) cases_.push_back({c.id(), "", 0, {}});
}

void SuiteLive::started(size_t index) {
  std::lock_guard lock(mu_);
  if (index >= cases_.size()) return;
  cases_[index].outcome = "running";
  cases_[index].since = std::chrono::steady_clock::now();
}

void SuiteLive::ended(size_t index, const std::string& outcome, double wall_s) {
  std::lock_guard lock(mu_);
  if (index >= cases_.size()) return;
  cases_[index].wall_s += wall_s;
  cases_[index].outcome = outcome;  // "" : queued again for its next try
}

std::vector<MetricValues> SuiteLive::values() const {
  using Type = MetricValues::Type;
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  MetricValues info{"faultline_suite_info",
                    "A suite result (value 1), labelled with its build.",
                    Type::kGauge,
                    {}};
  info.samples.push_back(
      {{{"suite", suite_}, {"commit", commit_}, {"host", host_}, {"started", started_}}, 1});
  MetricValues wall{
      "faultline_suite_wall_seconds", "Wall time of the whole suite (so far).", Type::kGauge, {}};
  wall.samples.push_back({{{"suite", suite_}}, std::chrono::duration<double>(now - t0_).count()});
  // Every outcome a finished suite reports, and the two only a running one has.
  std::map<std::string, int> by_outcome = {{"pass", 0},        {"fail", 0},   {"error", 0},
                                           {"unknown", 0},     {"flaky", 0},  {"skipped", 0},
                                           {"interrupted", 0}, {"queued", 0}, {"running", 0}};
  MetricValues duration{"faultline_case_duration_seconds",
                        "A case's wall time over its tries, the running one up to now.",
                        Type::kGauge,
                        {}};
  for (const auto& c : cases_) {
    ++by_outcome[c.outcome.empty() ? "queued" : c.outcome];
    double s = c.wall_s;
    if (c.outcome == "running") s += std::chrono::duration<double>(now - c.since).count();
    if (!c.outcome.empty() || s > 0) {
      duration.samples.push_back(
          {{{"suite", suite_}, {"case", c.id}, {"state", c.outcome.empty() ? "queued" : c.outcome}},
           s});
    }
  }
  MetricValues runs{"faultline_suite_runs",
                    "Runs of the suite by outcome (queued and running while it goes).",
                    Type::kGauge,
                    {}};
  for (const auto& [outcome, n] : by_outcome) {
    runs.samples.push_back({{{"suite", suite_}, {"outcome", outcome}}, static_cast<double>(n)});
  }
  return {info, runs, wall, duration};
}

std::unique_ptr<MetricsEndpoint> start_suite_metrics(const SuiteResult& res, const SuiteOptions& o,
                                                     const SuiteLive& live) {
  std::string secret = o.metrics_secret;
  std::string where = "--metrics-secret-file";
  if (secret.empty()) {
    secret = make_control_secret();
    where = res.dir + "/metrics.secret";
    write_secret_file(where, secret + "\n");
  }
  auto endpoint = std::make_unique<MetricsEndpoint>(secret, [&live] { return live.values(); });
  const std::string addr = endpoint->start(o.metrics_listen);
  write_atomic(res.dir + "/metrics.addr", addr + "\n");
  std::fprintf(stderr, "faultline suite: live metrics on http://%s/metrics (secret: %s)\n",
               addr.c_str(), where.c_str());
  return endpoint;
}

}  // namespace fl::harness
