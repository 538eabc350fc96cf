// The Prometheus series of a job's status (run_metrics.cpp; docs/reports.md#live-metrics): what a
// run's /metrics endpoint answers at each scrape.
#pragma once

#include <vector>

#include "harness/control/metrics_endpoint.hpp"
#include "harness/history/job_status.hpp"

namespace fl::harness {

std::vector<MetricValues> job_metric_values(const JobStatus& s);

}  // namespace fl::harness
