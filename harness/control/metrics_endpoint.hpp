// A live Prometheus endpoint (GET /metrics, text exposition format) for a running run or suite,
// served by prometheus-cpp's Exposer (civetweb) behind a pimpl: no prometheus-cpp or civetweb
// header reaches the files that include this one. The series are not kept here: `collect` builds
// them at each scrape from the caller's live state, so an age ("in this collective for 4.1 s")
// is as of the scrape.
//
// The access rule is the control plane's: every request must carry the secret, as
// `Authorization: Bearer SECRET` (what Prometheus sends for `authorization: {credentials_file:
// FILE}`), compared in constant time; anything else is answered 401 before its path is looked
// at. It listens on loopback unless told another address.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fl::harness {

struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

struct MetricValues {
  enum class Type { kGauge, kCounter };
  std::string name, help;
  Type type = Type::kGauge;
  std::vector<MetricSample> samples;  // one per label set
};

class MetricsEndpoint {
 public:
  using Collect = std::function<std::vector<MetricValues>()>;
  // `secret` must not be empty; `collect` runs on the server's threads (it must be thread-safe).
  MetricsEndpoint(std::string secret, Collect collect);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Listens on IPV4:PORT ("127.0.0.1:0" picks a free port); returns the bound "IPV4:PORT".
  // Error when it cannot listen.
  std::string start(const std::string& listen);
  uint64_t scrapes() const;       // answered with the secret
  uint64_t unauthorized() const;  // answered 401

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// "IPV4:PORT" from --metrics-port PORT (loopback) or --metrics-listen IPV4:PORT; a
// ConfigError naming `option` and what is allowed for anything else.
std::string metrics_listen_address(const std::string& option, const std::string& value);

// The secret in FILE (--metrics-secret-file): its first line, which must not be empty; the file
// must be a regular file no other user can read or write (it is a credential). ConfigError naming
// the file and what is wrong.
std::string read_metrics_secret_file(const std::string& path);

}  // namespace fl::harness
