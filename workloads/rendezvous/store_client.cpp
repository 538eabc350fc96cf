#include "workloads/rendezvous/store_client.hpp"

#include <utility>  // boost 1.74 asio uses std::exchange without including it

#include <boost/asio.hpp>

#include <thread>

#include "workloads/rendezvous/protocol.hpp"

namespace fl::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;
using store_clock = std::chrono::steady_clock;  // not `clock`: a unity batch shares it

struct StoreClient::Conn {
  asio::io_context io;
  tcp::socket socket{io};
  bool broken = false;
  std::string broken_reason;

  // Runs the io_context until `done` or the deadline; returns false on deadline.
  bool run_until(const bool& done, store_clock::time_point deadline) {
    io.restart();
    while (!done) {
      auto now = store_clock::now();
      if (now >= deadline) break;
      io.run_one_for(deadline - now);
    }
    if (done) return true;
    boost::system::error_code ec;
    socket.cancel(ec);
    io.restart();
    io.run();  // drain the cancelled handlers
    return false;
  }
};

namespace {
uint8_t op(Command c) {
  return static_cast<uint8_t>(c);
}

Reader expect_ok(const std::string& body, const std::string& endpoint, const char* what,
                 std::string* timeout_payload = nullptr) {
  Reader r(body);
  auto status = static_cast<Status>(r.head());
  if (status == Status::kOk) return r;
  if (status == Status::kTimeout && timeout_payload) {
    *timeout_payload = body;
    return r;
  }
  throw StoreError(
      StoreErrorKind::kServer,
      fmt::format("rendezvous store {} on {}: server error: {}", what, endpoint, r.str()));
}
}  // namespace

StoreClient::StoreClient(const std::string& host, uint16_t port, ms timeout, ms connect_timeout,
                         const std::string& secret)
    : endpoint_(fmt::format("{}:{}", host, port)), timeout_(timeout), conn_(new Conn) {
  // A connection the server closes at the secret is tried again (it may have been evicted by a
  // flood of others that never authenticate); a wrong secret fails every time.
  constexpr int kAuthAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    connect(host, port, connect_timeout);
    try {
      authenticate(secret);
      return;
    } catch (const StoreError& e) {
      if (e.kind() != StoreErrorKind::kUnauthenticated || attempt == kAuthAttempts) throw;
      conn_.reset(new Conn);
    }
  }
}

void StoreClient::connect(const std::string& host, uint16_t port, ms connect_timeout) {
  auto& c = *conn_;
  boost::system::error_code ec;
  tcp::resolver resolver(c.io);
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) {
    throw StoreError(
        StoreErrorKind::kResolve,
        fmt::format("cannot resolve the rendezvous store address '{}': {}", host, ec.message()));
  }
  const auto start = store_clock::now();
  const auto deadline = start + connect_timeout;
  auto backoff = std::chrono::milliseconds(20);
  int attempts = 0;
  boost::system::error_code last;
  for (;;) {
    ++attempts;
    bool done = false;
    boost::system::error_code result;
    c.socket = tcp::socket(c.io);
    asio::async_connect(c.socket, endpoints,
                        [&](const boost::system::error_code& e, const tcp::endpoint&) {
                          result = e;
                          done = true;
                        });
    if (!c.run_until(done, deadline)) {
      auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(store_clock::now() - start).count();
      throw StoreError(StoreErrorKind::kConnectTimeout,
                       fmt::format("cannot reach the rendezvous store at {}: connect timed out "
                                   "after {} ms (no answer to the connection request; a firewall "
                                   "may be dropping packets to this address)",
                                   endpoint_, waited));
    }
    if (!result) break;
    last = result;
    auto now = store_clock::now();
    if (now + backoff >= deadline) {
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
      bool refused = result == asio::error::connection_refused;
      throw StoreError(
          refused ? StoreErrorKind::kRefused : StoreErrorKind::kConnectTimeout,
          fmt::format("cannot reach the rendezvous store at {}: {} on every attempt for {} ms "
                      "({} attempts){}",
                      endpoint_,
                      refused ? std::string("connection refused (ECONNREFUSED)") : result.message(),
                      waited, attempts,
                      refused ? "; nothing is listening there: check MASTER_ADDR/MASTER_PORT and "
                                "that the store (rank 0 or the harness) is up"
                              : ""));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  c.socket.set_option(tcp::no_delay(true));
}

void StoreClient::authenticate(const std::string& secret) {
  try {
    expect_ok(call(Writer(op(Command::kAuth)).str(secret).finish(), timeout_, "authentication"),
              endpoint_, "authentication");
  } catch (const StoreError& e) {
    if (e.kind() != StoreErrorKind::kConnectionLost) throw;
    throw StoreError(
        StoreErrorKind::kUnauthenticated,
        fmt::format("rendezvous store at {}: the server closed the connection when this process "
                    "presented {}; the store takes only the run's secret "
                    "(FAULTLINE_CONTROL_SECRET, which the harness gives every rank)",
                    endpoint_,
                    secret.empty() ? std::string("no secret (FAULTLINE_CONTROL_SECRET is unset)")
                                   : std::string("a secret that is not the store's")));
  }
}

StoreClient::~StoreClient() {
  boost::system::error_code ec;
  conn_->socket.close(ec);
}

std::string StoreClient::call(const std::string& frame, ms wait_for, const char* what) {
  auto& c = *conn_;
  if (c.broken) {
    throw StoreError(StoreErrorKind::kConnectionLost,
                     fmt::format("rendezvous store {} on {}: the connection is closed after an "
                                 "earlier failure ({})",
                                 what, endpoint_, c.broken_reason));
  }
  // The server answers a timed-out get/wait itself; allow it a grace period to do so.
  const auto deadline = store_clock::now() + wait_for + std::chrono::milliseconds(2000);
  bool done = false;
  boost::system::error_code err;
  char header[4];
  std::string body;
  asio::async_write(c.socket, asio::buffer(frame), [&](const boost::system::error_code& e, size_t) {
    if (e) {
      err = e;
      done = true;
      return;
    }
    asio::async_read(c.socket, asio::buffer(header, 4),
                     [&](const boost::system::error_code& e2, size_t) {
                       if (e2) {
                         err = e2;
                         done = true;
                         return;
                       }
                       uint32_t n;
                       std::memcpy(&n, header, 4);
                       if (n == 0 || n > kMaxFrame) {
                         err = asio::error::message_size;
                         done = true;
                         return;
                       }
                       body.resize(n);
                       asio::async_read(c.socket, asio::buffer(body.data(), n),
                                        [&](const boost::system::error_code& e3, size_t) {
                                          err = e3;
                                          done = true;
                                        });
                     });
  });
  if (!c.run_until(done, deadline)) {
    c.broken = true;
    c.broken_reason = "a call timed out";
    throw StoreError(StoreErrorKind::kCallTimeout,
                     fmt::format("rendezvous store {} on {}: no answer within {} ms", what,
                                 endpoint_, (wait_for + std::chrono::milliseconds(2000)).count()));
  }
  if (err) {
    c.broken = true;
    c.broken_reason = err.message();
    throw StoreError(StoreErrorKind::kConnectionLost,
                     fmt::format("rendezvous store {} on {}: connection lost ({})", what, endpoint_,
                                 err == asio::error::eof ? "closed by the server" : err.message()));
  }
  return body;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  expect_ok(call(Writer(op(Command::kSet)).str(key).str(value).finish(), timeout_, "set"),
            endpoint_, "set");
}

std::string StoreClient::get(const std::string& key, ms timeout) {
  if (timeout.count() < 0) timeout = timeout_;
  std::string timed_out;
  auto body =
      call(Writer(op(Command::kGet)).str(key).i64(timeout.count()).finish(), timeout, "get");
  Reader r = expect_ok(body, endpoint_, "get", &timed_out);
  if (!timed_out.empty()) {
    throw StoreError(
        StoreErrorKind::kKeyTimeout,
        fmt::format("rendezvous store get('{}') on {}: key did not appear within {} ms", key,
                    endpoint_, timeout.count()));
  }
  return r.str();
}

void StoreClient::wait(const std::vector<std::string>& keys, ms timeout) {
  if (timeout.count() < 0) timeout = timeout_;
  Writer w(op(Command::kWait));
  w.i64(static_cast<int64_t>(keys.size()));
  for (auto& k : keys) w.str(k);
  w.i64(timeout.count());
  std::string timed_out;
  auto body = call(w.finish(), timeout, "wait");
  Reader r = expect_ok(body, endpoint_, "wait", &timed_out);
  if (!timed_out.empty()) {
    int64_t n = r.i64();
    std::string missing;
    for (int64_t i = 0; i < n; ++i) missing += (i ? ", '" : "'") + r.str() + "'";
    throw StoreError(StoreErrorKind::kKeyTimeout,
                     fmt::format("rendezvous store wait on {}: {} of {} keys still missing after "
                                 "{} ms: {}",
                                 endpoint_, n, keys.size(), timeout.count(), missing));
  }
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  return expect_ok(call(Writer(op(Command::kAdd)).str(key).i64(delta).finish(), timeout_, "add"),
                   endpoint_, "add")
      .i64();
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  return expect_ok(
             call(Writer(op(Command::kCompareSet)).str(key).str(expected).str(desired).finish(),
                  timeout_, "compare_set"),
             endpoint_, "compare_set")
      .str();
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  Writer w(op(Command::kCheck));
  w.i64(static_cast<int64_t>(keys.size()));
  for (auto& k : keys) w.str(k);
  return expect_ok(call(w.finish(), timeout_, "check"), endpoint_, "check").i64() != 0;
}

bool StoreClient::remove(const std::string& key) {
  return expect_ok(call(Writer(op(Command::kDelete)).str(key).finish(), timeout_, "delete"),
                   endpoint_, "delete")
             .i64() != 0;
}

int64_t StoreClient::num_keys() {
  return expect_ok(call(Writer(op(Command::kNumKeys)).finish(), timeout_, "num_keys"), endpoint_,
                   "num_keys")
      .i64();
}

}  // namespace fl::rdzv
