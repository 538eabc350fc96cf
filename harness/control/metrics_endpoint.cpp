// The live /metrics endpoint (metrics_endpoint.hpp): prometheus-cpp's Exposer serving one
// Collectable that asks the caller for its series at each scrape, and civetweb's begin_request
// callback holding every request to the secret before the Exposer sees it.
#include "harness/control/metrics_endpoint.hpp"

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "base/file_read.hpp"

namespace fl::harness {

// What the Exposer collects at each scrape: the caller's series, converted.
class LiveCollectable : public prometheus::Collectable {
 public:
  explicit LiveCollectable(MetricsEndpoint::Collect c) : collect_(std::move(c)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<MetricValues> values;
    try {
      values = collect_();
    } catch (const std::exception&) {
      return {};  // on a server thread: an empty scrape, never a crash of the run
    }
    std::vector<prometheus::MetricFamily> out;
    for (auto& v : values) {
      prometheus::MetricFamily f;
      f.name = v.name;
      f.help = v.help;
      const bool counter = v.type == MetricValues::Type::kCounter;
      f.type = counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
      for (auto& s : v.samples) {
        prometheus::ClientMetric m;
        for (auto& [k, val] : s.labels) m.label.push_back({k, val});
        (counter ? m.counter.value : m.gauge.value) = s.value;
        f.metric.push_back(std::move(m));
      }
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
  MetricsEndpoint::Collect collect_;
};

struct MetricsEndpoint::Impl {
  std::string secret;
  std::shared_ptr<LiveCollectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::atomic<uint64_t> scrapes{0}, unauthorized{0};
  int port = 0;
};

namespace {

// civetweb's callbacks are plain function pointers: the endpoint a request reached is found by
// the port it came in on. A port with no endpoint (yet) is refused like a wrong secret.
std::mutex g_ports_mu;
std::map<int, std::weak_ptr<MetricsEndpoint::Impl>> g_ports;

int refuse(mg_connection* conn) {
  static const std::string body =
      "the run's secret is required: Authorization: Bearer SECRET (RUN_DIR/control.secret, or "
      "the file given to --metrics-secret-file)\n";
  mg_printf(conn,
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"faultline\"\r\n"
            "Content-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
            body.size(), body.c_str());
  return 401;  // handled here (civetweb logs it as the status)
}

// 0 lets the Exposer answer; anything else was answered here.
int check_secret(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  std::shared_ptr<MetricsEndpoint::Impl> impl;
  {
    std::lock_guard lock(g_ports_mu);
    if (auto it = g_ports.find(ri ? ri->server_port : -1); it != g_ports.end()) {
      impl = it->second.lock();
    }
  }
  const char* auth = mg_get_header(conn, "Authorization");
  const std::string a = auth ? auth : "";
  if (impl && a.rfind("Bearer ", 0) == 0 && secrets_equal(a.substr(7), impl->secret)) {
    ++impl->scrapes;
    return 0;
  }
  if (impl) ++impl->unauthorized;
  return refuse(conn);
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(std::string secret, Collect collect)
    : impl_(std::make_shared<Impl>()) {
  if (secret.empty()) raise<Error>("metrics endpoint: an empty secret");
  impl_->secret = std::move(secret);
  impl_->collectable = std::make_shared<LiveCollectable>(std::move(collect));
}

MetricsEndpoint::~MetricsEndpoint() {
  impl_->exposer.reset();  // stops civetweb's threads: no request runs past here
  std::lock_guard lock(g_ports_mu);
  g_ports.erase(impl_->port);
}

std::string MetricsEndpoint::start(const std::string& listen) {
  static CivetCallbacks callbacks = [] {
    CivetCallbacks c;
    c.begin_request = check_secret;
    return c;
  }();
  // Two threads answer scrapes; a client that sends nothing is dropped after 5 s.
  std::vector<std::string> options = {"listening_ports",    listen, "num_threads", "2",
                                      "request_timeout_ms", "5000"};
  try {
    impl_->exposer = std::make_unique<prometheus::Exposer>(options, &callbacks);
  } catch (const std::exception& e) {
    raise<Error>("metrics endpoint: cannot listen on {}: {}", listen, e.what());
  }
  const auto ports = impl_->exposer->GetListeningPorts();
  if (ports.empty()) raise<Error>("metrics endpoint: cannot listen on {}", listen);
  impl_->port = ports.front();
  {
    std::lock_guard lock(g_ports_mu);
    g_ports[impl_->port] = impl_;
  }
  impl_->exposer->RegisterCollectable(impl_->collectable);
  return fmt::format("{}:{}", listen.substr(0, listen.rfind(':')), impl_->port);
}

uint64_t MetricsEndpoint::scrapes() const {
  return impl_->scrapes;
}

uint64_t MetricsEndpoint::unauthorized() const {
  return impl_->unauthorized;
}

std::string metrics_listen_address(const std::string& option, const std::string& value) {
  const bool port_only = option == "--metrics-port";
  const size_t colon = value.rfind(':');
  const std::string host = port_only ? "127.0.0.1" : value.substr(0, colon);
  const std::string port = port_only                    ? value
                           : colon == std::string::npos ? ""
                                                        : value.substr(colon + 1);
  // civetweb's listening_ports takes a dotted IPv4 address (this build has no IPv6 listener).
  const bool host_ok = !host.empty() && host.find_first_not_of("0123456789.") == std::string::npos;
  const bool port_ok = !port.empty() && port.size() <= 5 &&
                       port.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoi(port) <= 65535;
  if (!host_ok || !port_ok) {
    throw ConfigError(fmt::format("{} '{}': expected {}; port 0 picks a free one", option, value,
                                  port_only ? "a port 0-65535 (the endpoint listens on 127.0.0.1)"
                                            : "IPV4:PORT, e.g. 127.0.0.1:9400 or 0.0.0.0:9400"));
  }
  return host + ":" + port;
}

std::string read_metrics_secret_file(const std::string& path) {
  std::string why;
  const FileFd f = open_regular_file(path, &why);
  if (!f) raise<ConfigError>("--metrics-secret-file {}: {}", path, why);
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) raise<ConfigError>("--metrics-secret-file {}: cannot stat", path);
  if ((st.st_mode & 077) != 0 || (st.st_uid != ::geteuid() && st.st_uid != 0)) {
    raise<ConfigError>(
        "--metrics-secret-file {}: owner uid {}, mode {:04o}; allowed: a file of yours (or root's) "
        "that no other user can read or write (chmod 600): it is the endpoint's credential",
        path, st.st_uid, st.st_mode & 07777);
  }
  const std::string text = read_regular_file(path, 4096);
  // As Prometheus reads a credentials_file: surrounding whitespace is not part of it.
  const std::string line = text.substr(0, text.find('\n'));
  const size_t b = line.find_first_not_of(" \t\r");
  if (b == std::string::npos) {
    raise<ConfigError>("--metrics-secret-file {}: the first line is empty (allowed: the secret)",
                       path);
  }
  return line.substr(b, line.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace fl::harness
