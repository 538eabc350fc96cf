#include "workloads/rendezvous/artifacts.hpp"

#include <unistd.h>

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "base/file_lock.hpp"
#include "base/json_bounded.hpp"
#include "base/private_dir.hpp"
#include "base/settings.hpp"

namespace fl::rdzv {

FAULTLINE_SETTING(kArtifactUrl, std::string, "FAULTLINE_ARTIFACT_URL", "",
                  "Base URL artifacts are fetched from (http://HOST:PORT[/PATH])");
FAULTLINE_SETTING(kArtifactCache, std::string, "FAULTLINE_ARTIFACT_CACHE", "",
                  "Where fetched artifacts are cached (default: $TMPDIR/faultline-artifacts-UID, "
                  "0700; a directory another user can write is refused)");
FAULTLINE_SETTING(kArtifactTimeoutMs, int64_t, "FAULTLINE_ARTIFACT_TIMEOUT_MS", 2000,
                  "Deadline of one fetch attempt");

namespace {
namespace fs = std::filesystem;
namespace http = boost::beast::http;
using boost::asio::ip::tcp;

struct Url {
  std::string host, port, path;
};

Url parse_url(const std::string& base, const std::string& name) {
  static const std::regex re(R"(^http://([^/:]+)(?::([0-9]+))?(/.*)?$)");
  std::smatch m;
  if (!std::regex_match(base, m, re)) {
    raise<ArtifactError>(
        "cannot fetch artifact '{}': FAULTLINE_ARTIFACT_URL='{}' is not an http://HOST[:PORT] URL",
        name, base);
  }
  std::string path = m[3].matched ? m[3].str() : "";
  if (path.empty() || path.back() != '/') path += '/';
  return {m[1].str(), m[2].matched ? m[2].str() : "80", path + name};
}

// One GET; returns the body or throws ArtifactError with the reason.
std::string get_once(const Url& u, const std::string& url) {
  boost::asio::io_context io;
  boost::beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::milliseconds(kArtifactTimeoutMs.get()));
  boost::beast::error_code ec;
  tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(u.host, u.port, ec);
  if (ec) raise<ArtifactError>("{}: cannot resolve {}: {}", url, u.host, ec.message());
  stream.connect(endpoints, ec);
  if (ec) raise<ArtifactError>("{}: {}", url, ec.message());
  http::request<http::empty_body> req{http::verb::get, u.path, 11};
  req.set(http::field::host, u.host);
  req.set(http::field::user_agent, "faultline-worker");
  // The harness's hub serves only the run's own ranks: the run's secret, as a bearer token.
  const char* secret = std::getenv(kControlSecretEnv);
  const bool has_secret = secret != nullptr && *secret != '\0';
  if (has_secret) req.set(http::field::authorization, std::string("Bearer ") + secret);
  http::write(stream, req, ec);
  if (ec) raise<ArtifactError>("{}: sending the request: {}", url, ec.message());
  boost::beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(stream, buf, parser, ec);
  if (ec) raise<ArtifactError>("{}: reading the response: {}", url, ec.message());
  auto res = parser.release();
  if (res.result() == http::status::unauthorized) {
    raise<ArtifactError>(
        "{}: HTTP 401 {} (the hub serves only requests with the run's secret, "
        "FAULTLINE_CONTROL_SECRET{})",
        url, std::string(res.reason()),
        has_secret ? ", and this one is not it" : ", which this process lacks");
  }
  if (res.result() != http::status::ok) {
    raise<ArtifactError>("{}: HTTP {} {}", url, res.result_int(), std::string(res.reason()));
  }
  return std::move(res.body());
}
}  // namespace

std::string fetch_artifact(const std::string& name) {
  fs::path cache;
  try {
    cache =
        private_cache_dir(kArtifactCache.get(), "faultline-artifacts", "FAULTLINE_ARTIFACT_CACHE");
  } catch (const Error& e) {
    raise<ArtifactError>("cannot fetch artifact '{}': {}", name, e.what());
  }
  const fs::path file = cache / name;
  const auto lock = FileLock::acquire<ArtifactError>((cache / (name + ".lock")).string());
  if (fs::exists(file)) return file.string();
  const std::string base = kArtifactUrl.get();
  if (base.empty()) {
    raise<ArtifactError>(
        "cannot fetch artifact '{}': it is not in the cache {} and FAULTLINE_ARTIFACT_URL is "
        "not set",
        name, cache.string());
  }
  const Url u = parse_url(base, name);
  const std::string url = fmt::format("http://{}:{}{}", u.host, u.port, u.path);
  std::string last;
  constexpr int kAttempts = 3;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    try {
      const std::string body = get_once(u, url);
      const fs::path tmp = cache / fmt::format("{}.tmp.{}", name, ::getpid());
      std::ofstream(tmp, std::ios::binary) << body;
      fs::rename(tmp, file);
      return file.string();
    } catch (const ArtifactError& e) {
      last = e.what();
    }
    if (attempt < kAttempts) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  raise<ArtifactError>("cannot fetch artifact '{}' after {} attempts: {}", name, kAttempts, last);
}

int tokenizer_vocab(const std::string& path) {
  const auto j = read_json_file(path).value_or(nlohmann::json());  // fetched from the hub
  if (!j.is_object() || !j.contains("vocab") || !j["vocab"].is_number_integer()) {
    raise<ArtifactError>("{}: not a tokenizer description (expected JSON with an integer 'vocab')",
                         path);
  }
  return j["vocab"].get<int>();
}

}  // namespace fl::rdzv
