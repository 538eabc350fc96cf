// A run's live /metrics endpoint (`faultline run --metrics-port`, docs/reports.md#live-metrics):
// the job status (history/job_status.hpp), fed by the history as events arrive, as Prometheus
// series at each scrape. Its address goes to RUN_DIR/metrics.addr and the history.
#include <fmt/format.h>

#include "harness/control/metrics_endpoint.hpp"
#include "harness/history/job_status.hpp"
#include "harness/run/run.hpp"
#include "harness/run/run_metrics.hpp"

namespace fl::harness {

namespace {

using Type = MetricValues::Type;

MetricValues metric_family(const std::string& name, Type type, const std::string& help) {
  return MetricValues{name, help, type, {}};
}

double metric_seconds(int64_t ns) {
  return static_cast<double>(ns) / 1e9;
}

// Per rank: up, missing, step, silence, the collective it is in and the last one it reported.
void rank_series(const JobStatus& s, std::vector<MetricValues>& out) {
  auto up =
      metric_family("faultline_rank_up", Type::kGauge, "1 while the rank runs, 0 once it ended.");
  auto missing =
      metric_family("faultline_rank_missing", Type::kGauge,
                    "1 when the rank is alive but silent for over 3 s while its peers report.");
  auto step =
      metric_family("faultline_rank_step", Type::kGauge, "The last step the rank reported.");
  auto age = metric_family("faultline_rank_last_event_age_seconds", Type::kGauge,
                           "Since the rank's last event (heartbeats every second included).");
  auto in = metric_family("faultline_rank_collective_seconds", Type::kGauge,
                          "How long the rank has been in the collective it reported in flight.");
  auto last_seq = metric_family("faultline_rank_last_collective_seq", Type::kGauge,
                                "Sequence number of the last collective the rank reported.");
  auto last_age = metric_family("faultline_rank_last_collective_age_seconds", Type::kGauge,
                                "Since the last collective the rank reported began.");
  for (const auto& r : s.ranks) {
    const std::vector<std::pair<std::string, std::string>> l = {{"run", s.run_id},
                                                                {"rank", std::to_string(r.rank)}};
    up.samples.push_back({l, r.alive() ? 1.0 : 0.0});
    missing.samples.push_back({l, r.missing ? 1.0 : 0.0});
    step.samples.push_back({l, static_cast<double>(r.last_step)});
    if (r.last_event_ns >= 0) age.samples.push_back({l, metric_seconds(s.at_ns - r.last_event_ns)});
    if (!r.coll_op.empty()) {
      auto lc = l;
      lc.insert(lc.end(), {{"op", r.coll_op}, {"group", r.coll_group}});
      in.samples.push_back({lc, metric_seconds(s.at_ns - r.coll_since_ns)});
    }
    if (!r.last_coll_op.empty()) {
      auto lc = l;
      lc.insert(
          lc.end(),
          {{"op", r.last_coll_op}, {"group", r.last_coll_group}, {"state", r.last_coll_state}});
      last_seq.samples.push_back({lc, static_cast<double>(r.last_coll_seq)});
      last_age.samples.push_back({lc, metric_seconds(s.at_ns - r.last_coll_since_ns)});
    }
  }
  for (auto* f : {&up, &missing, &step, &age, &in, &last_seq, &last_age}) {
    out.push_back(std::move(*f));
  }
}

}  // namespace

std::vector<MetricValues> job_metric_values(const JobStatus& s) {
  std::vector<MetricValues> out;
  auto info = metric_family("faultline_run_info", Type::kGauge, "A run in progress (value 1).");
  info.samples.push_back({{{"run", s.run_id}, {"scenario", s.scenario}}, 1});
  auto elapsed =
      metric_family("faultline_run_elapsed_seconds", Type::kGauge, "Since the run started.");
  elapsed.samples.push_back({{{"run", s.run_id}}, metric_seconds(s.at_ns)});
  auto world =
      metric_family("faultline_run_ranks", Type::kGauge, "Ranks of the run (its world size).");
  world.samples.push_back({{{"run", s.run_id}}, static_cast<double>(s.world)});
  out.push_back(std::move(info));
  out.push_back(std::move(elapsed));
  out.push_back(std::move(world));
  rank_series(s, out);
  auto fired = metric_family("faultline_faults_fired_total", Type::kCounter,
                             "Firings of in-process fault sites, by site, action and rank.");
  auto injected = metric_family("faultline_faults_injected_total", Type::kCounter,
                                "Out-of-process faults injected, by kind and rank.");
  for (const auto& f : s.faults) {
    const std::string rank = f.rank >= 0 ? std::to_string(f.rank) : "";
    if (f.kind == "fault_fired") {
      fired.samples.push_back(
          {{{"run", s.run_id}, {"rank", rank}, {"site", f.what}, {"action", f.action}},
           1.0 * f.count});
    } else {
      injected.samples.push_back(
          {{{"run", s.run_id}, {"rank", rank}, {"fault", f.what}}, 1.0 * f.count});
    }
  }
  out.push_back(std::move(fired));
  out.push_back(std::move(injected));
  return out;
}

namespace detail {

void Run::start_metrics_endpoint() {
  if (o_.metrics_listen.empty()) return;
  status_ = std::make_unique<JobStatusBuilder>();
  int id = -1;
  for (const auto& e :
       hist_->snapshot_and_listen([this](const HistoryEvent& e) { status_->add(e); }, &id)) {
    status_->add(e);
  }
  metrics_ = std::make_unique<MetricsEndpoint>(
      o_.metrics_secret.empty() ? secret_ : o_.metrics_secret,
      [this] { return job_metric_values(status_->at(hist_->now_ns())); });
  metrics_addr_ = metrics_->start(o_.metrics_listen);
  run_dir_.write_atomic("metrics.addr", metrics_addr_ + "\n");
  hist_->harness(
      "metrics_endpoint",
      {{"addr", metrics_addr_},
       {"url", fmt::format("http://{}/metrics", metrics_addr_)},
       {"secret", o_.metrics_secret.empty() ? "control.secret" : "--metrics-secret-file"}});
}

}  // namespace detail

}  // namespace fl::harness
