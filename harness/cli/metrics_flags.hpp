// --metrics-port, --metrics-listen and --metrics-secret-file of `run` and `suite`: the live
// /metrics endpoint (docs/reports.md#live-metrics). Included by the files that parse CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "harness/control/metrics_endpoint.hpp"

namespace fl::cli {

struct MetricsFlags {
  std::string port, listen, secret_file;
};

// `dir` names where the address goes (RUN_DIR, SUITE_DIR); `secret_default` what the endpoint
// asks for without --metrics-secret-file.
inline void add_metrics_flags(CLI::App& sub, MetricsFlags& f, const std::string& dir,
                              const std::string& secret_default) {
  auto* port =
      sub.add_option("--metrics-port", f.port,
                     "Serve live Prometheus metrics on 127.0.0.1:PORT/metrics (0: a free "
                     "port; the address goes to " +
                         dir + "/metrics.addr); requests need Authorization: Bearer SECRET");
  auto* listen = sub.add_option("--metrics-listen", f.listen,
                                "As --metrics-port, on IPV4:PORT (e.g. 0.0.0.0:9400 for a "
                                "Prometheus on another machine)");
  port->excludes(listen);
  sub.add_option(
      "--metrics-secret-file", f.secret_file,
      "The endpoint's secret: the first line of FILE (mode 0600; default: " + secret_default + ")");
}

// Into `listen` ("" : no endpoint) and `secret` ("" : the default); ConfigError for bad values.
inline void resolve_metrics_flags(const MetricsFlags& f, std::string& listen, std::string& secret) {
  if (!f.port.empty()) listen = fl::harness::metrics_listen_address("--metrics-port", f.port);
  if (!f.listen.empty()) listen = fl::harness::metrics_listen_address("--metrics-listen", f.listen);
  if (!f.secret_file.empty()) secret = fl::harness::read_metrics_secret_file(f.secret_file);
}

}  // namespace fl::cli
