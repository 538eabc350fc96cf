#include "workloads/rendezvous/store_server.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>  // boost 1.74 asio uses std::exchange without including it

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <list>
#include <map>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "base/control_auth.hpp"
#include "workloads/rendezvous/protocol.hpp"

namespace fl::rdzv {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace store_detail {

class Session;

// A get/wait parked until its keys exist or its timer fires.
struct Waiter {
  std::vector<std::string> keys;
  std::function<void(bool satisfied)> done;
  std::unique_ptr<asio::steady_timer> timer;
  bool finished = false;
};

}  // namespace store_detail

using store_detail::Session;
using store_detail::Waiter;

// A request refused for one of the store's limits (answered with an error, logged with its peer).
class LimitError : public Error {
 public:
  using Error::Error;
};

std::string store_secret_from_env() {
  const char* s = std::getenv(kControlSecretEnv);
  return s != nullptr ? std::string(s) : std::string();
}

struct StoreServer::State : std::enable_shared_from_this<StoreServer::State> {
  State(StoreLimits l, std::string s) : limits(l), secret(std::move(s)) {}
  asio::io_context io;
  tcp::acceptor acceptor{io};
  const StoreLimits limits;
  const std::string secret;
  std::map<std::string, std::string> data;
  std::list<std::shared_ptr<Waiter>> waiters;
  std::set<std::shared_ptr<Session>> sessions;
  std::list<std::shared_ptr<Session>> pending;  // not yet authenticated, oldest first
  bool stopped = false;
  // Written on the I/O thread, read by usage() from any thread.
  std::atomic<int64_t> stored_bytes{0}, buffered_bytes{0}, key_count{0}, refused{0};
  std::atomic<int64_t> connections{0}, pending_count{0}, unauthenticated{0};

  // Every change of `data` goes through put/erase, which keep the limits and the counters.
  void put(const std::string& k, std::string v) {
    auto it = data.find(k);
    const int64_t before =
        it == data.end() ? 0 : static_cast<int64_t>(k.size() + it->second.size());
    const int64_t after = static_cast<int64_t>(k.size() + v.size());
    if (it == data.end() && static_cast<int64_t>(data.size()) >= limits.max_keys) {
      throw LimitError(fmt::format(
          "the store holds {} keys, its limit (FAULTLINE_STORE_MAX_KEYS); key '{}' refused",
          data.size(), k.substr(0, 64)));
    }
    if (stored_bytes - before + after > limits.max_bytes) {
      throw LimitError(fmt::format(
          "storing key '{}' ({} bytes) would make the store hold {} bytes, above its limit of {} "
          "(FAULTLINE_STORE_MAX_BYTES)",
          k.substr(0, 64), after, stored_bytes - before + after, limits.max_bytes));
    }
    if (it == data.end()) {
      data.emplace(k, std::move(v));
    } else {
      it->second = std::move(v);
    }
    stored_bytes += after - before;
    key_count = static_cast<int64_t>(data.size());
  }
  size_t erase(const std::string& k) {
    auto it = data.find(k);
    if (it == data.end()) return 0;
    stored_bytes -= static_cast<int64_t>(k.size() + it->second.size());
    data.erase(it);
    key_count = static_cast<int64_t>(data.size());
    return 1;
  }

  bool has_all(const std::vector<std::string>& keys) const {
    for (auto& k : keys) {
      if (!data.count(k)) return false;
    }
    return true;
  }
  void wake() {
    for (auto it = waiters.begin(); it != waiters.end();) {
      auto w = *it;
      if (!w->finished && has_all(w->keys)) {
        w->finished = true;
        w->timer->cancel();
        it = waiters.erase(it);
        w->done(true);
      } else {
        ++it;
      }
    }
  }
  void park(std::vector<std::string> keys, int64_t timeout_ms, std::function<void(bool)> done) {
    if (has_all(keys)) {
      done(true);
      return;
    }
    auto w = std::make_shared<Waiter>();
    w->keys = std::move(keys);
    w->done = std::move(done);
    w->timer = std::make_unique<asio::steady_timer>(io);
    w->timer->expires_after(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms));
    std::weak_ptr<Waiter> weak = w;
    w->timer->async_wait([this, weak](const boost::system::error_code& ec) {
      auto w2 = weak.lock();
      if (ec || !w2 || w2->finished) return;
      w2->finished = true;
      waiters.remove(w2);
      w2->done(false);
    });
    waiters.push_back(std::move(w));
  }
  void accept();
};

namespace store_detail {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, StoreServer::State* state)
      : socket_(std::move(socket)), state_(state), auth_timer_(socket_.get_executor()) {
    boost::system::error_code ec;
    const auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("an unknown peer")
               : fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }

  // Joins the pending connections (the caller made room) and waits for the secret, bounded.
  void start() {
    pending_at_ = state_->pending.insert(state_->pending.end(), shared_from_this());
    in_pending_ = true;
    ++state_->pending_count;
    auto self = shared_from_this();
    auth_timer_.expires_after(std::chrono::milliseconds(state_->limits.auth_timeout_ms));
    auth_timer_.async_wait([this, self](const boost::system::error_code& ec) {
      if (ec || authed_ || closed_) return;
      reject(
          fmt::format("it did not present the run's secret within {} ms "
                      "(FAULTLINE_STORE_AUTH_TIMEOUT_MS)",
                      state_->limits.auth_timeout_ms));
    });
    read_header();
  }
  void end() { drop(); }
  // Closes a connection that has not authenticated, unanswered: it learns nothing of the store.
  void reject(const std::string& why) {
    if (closed_) return;
    const int64_t n = state_->unauthenticated + 1;  // this one, counted by drop()
    if (n <= 10 || n % 1000 == 0) {  // an attacker's flood must not flood the rank's log
      spdlog::warn("rendezvous store: closed a connection from {} unanswered ({} so far): {}",
                   peer_, n, why);
    }
    drop();
  }

 private:
  void close() {
    boost::system::error_code ec;
    auth_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }
  void read_header() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_, 4),
                     [this, self](const boost::system::error_code& ec, size_t) {
                       if (ec) return drop();
                       uint32_t n;
                       std::memcpy(&n, header_, 4);
                       if (!authed_ && (n == 0 || n > kMaxAuthFrame)) {
                         return reject(
                             fmt::format("its first frame ({} bytes) is not the run's secret", n));
                       }
                       if (n == 0) return drop();
                       if (static_cast<int64_t>(n) > state_->limits.max_message) {
                         return refuse(fmt::format(
                             "a request of {} bytes is above the store's limit of {} bytes "
                             "(FAULTLINE_STORE_MAX_MESSAGE); closing the connection",
                             n, state_->limits.max_message));
                       }
                       expected_ = n;
                       read_body();
                     });
  }
  // The body grows with what arrives, never with what the header announced.
  void read_body() {
    auto self = shared_from_this();
    const size_t want = std::min(sizeof(chunk_), expected_ - body_.size());
    socket_.async_read_some(
        asio::buffer(chunk_, want), [this, self](const boost::system::error_code& ec, size_t got) {
          if (ec) return drop();
          // A first frame is bounded on its own (kMaxAuthFrame, FAULTLINE_STORE_MAX_PENDING), so
          // ranks full of requests never keep another rank from presenting its secret.
          const int64_t total = state_->buffered_bytes + static_cast<int64_t>(got);
          if (authed_ && total > state_->limits.max_buffered) {
            return refuse(fmt::format(
                "holding this request would make the store buffer {} bytes across all "
                "connections, above its limit of {} (FAULTLINE_STORE_MAX_BUFFERED); closing the "
                "connection",
                total, state_->limits.max_buffered));
          }
          body_.append(chunk_, got);
          state_->buffered_bytes += static_cast<int64_t>(got);
          if (body_.size() < expected_) return read_body();
          if (!authed_) return authenticate();
          try {
            handle();
          } catch (const LimitError& e) {
            ++state_->refused;
            spdlog::warn("rendezvous store: refused a request from {}: {}", peer_, e.what());
            reply(Writer(static_cast<uint8_t>(Status::kError)).str(e.what()).finish());
          } catch (const std::exception& e) {
            reply(Writer(static_cast<uint8_t>(Status::kError)).str(e.what()).finish());
          }
          release_body();
        });
  }
  void release_body() {
    state_->buffered_bytes -= static_cast<int64_t>(body_.size());
    body_.clear();
    if (body_.capacity() > sizeof(chunk_)) body_.shrink_to_fit();
    expected_ = 0;
  }
  // The first frame: kAuth with the run's secret (compared in constant time), or the connection
  // is closed unanswered.
  void authenticate() {
    bool ok = false;
    try {
      Reader r(body_);
      ok = static_cast<Command>(r.head()) == Command::kAuth &&
           secrets_equal(r.str(), state_->secret);
    } catch (const ProtocolError&) {
    }
    release_body();
    if (!ok) return reject("its first frame is not the run's secret");
    leave_pending();
    const int64_t serving = state_->connections;
    authed_ = true;
    ++state_->connections;
    if (serving >= state_->limits.max_connections) {
      return refuse(fmt::format(
          "the store serves {} connections, its limit (FAULTLINE_STORE_MAX_CONNECTIONS); closing "
          "this one",
          serving));
    }
    reply(Writer(static_cast<uint8_t>(Status::kOk)).finish());
  }
  void leave_pending() {
    auth_timer_.cancel();
    if (!in_pending_) return;
    in_pending_ = false;
    --state_->pending_count;
    state_->pending.erase(pending_at_);
  }
  // Answers with an error, logs it with the peer, and closes the connection once it is sent.
  void refuse(const std::string& why) {
    ++state_->refused;
    spdlog::warn("rendezvous store: refused a request from {}: {}", peer_, why);
    auto self = shared_from_this();
    auto out = std::make_shared<std::string>(
        Writer(static_cast<uint8_t>(Status::kError)).str(why).finish());
    asio::async_write(socket_, asio::buffer(*out),
                      [this, self, out](const boost::system::error_code&, size_t) { drop(); });
  }
  static Writer ok() { return Writer(static_cast<uint8_t>(Status::kOk)); }
  static std::vector<std::string> read_keys(Reader& r) {
    const int64_t n = r.i64();
    std::vector<std::string> keys;
    for (int64_t i = 0; i < n; ++i) keys.push_back(r.str());
    return keys;
  }
  // One request: the command, then its arguments (protocol.hpp); the answer is sent from here
  // or, for get and wait, when the keys are there or the timeout passed.
  void handle() {
    Reader r(body_);
    auto cmd = static_cast<Command>(r.head());
    switch (cmd) {
      case Command::kSet: {
        std::string k = r.str();
        state_->put(k, r.str());
        state_->wake();
        return reply(ok().finish());
      }
      case Command::kGet:
        return get_key(r);
      case Command::kWait:
        return wait_keys(r);
      case Command::kAdd:
        return add_to_key(r);
      case Command::kCompareSet:
        return compare_set(r);
      case Command::kCheck:
        return reply(ok().i64(state_->has_all(read_keys(r)) ? 1 : 0).finish());
      case Command::kDelete: {
        std::string k = r.str();
        return reply(ok().i64(static_cast<int64_t>(state_->erase(k))).finish());
      }
      case Command::kNumKeys:
        return reply(ok().i64(static_cast<int64_t>(state_->data.size())).finish());
      case Command::kAuth:
        break;  // once is enough: a second is an error like any unknown command
    }
    throw ProtocolError("unknown command " + std::to_string(static_cast<int>(cmd)));
  }
  void get_key(Reader& r) {
    std::string k = r.str();
    int64_t timeout = r.i64();
    auto self = shared_from_this();
    state_->park({k}, timeout, [this, self, k](bool satisfied) {
      if (!satisfied) {
        return reply(Writer(static_cast<uint8_t>(Status::kTimeout)).str(k).finish());
      }
      auto it = state_->data.find(k);
      reply(ok().str(it == state_->data.end() ? std::string() : it->second).finish());
    });
  }
  void wait_keys(Reader& r) {
    std::vector<std::string> keys = read_keys(r);
    int64_t timeout = r.i64();
    auto self = shared_from_this();
    state_->park(keys, timeout, [this, self, keys](bool satisfied) {
      if (satisfied) return reply(ok().finish());
      Writer w(static_cast<uint8_t>(Status::kTimeout));
      std::vector<std::string> missing;
      for (auto& k : keys) {
        if (!state_->data.count(k)) missing.push_back(k);
      }
      w.i64(static_cast<int64_t>(missing.size()));
      for (auto& k : missing) w.str(k);
      reply(w.finish());
    });
  }
  void add_to_key(Reader& r) {
    std::string k = r.str();
    int64_t delta = r.i64();
    int64_t v = 0;
    if (auto it = state_->data.find(k); it != state_->data.end()) {
      try {
        v = std::stoll(it->second);
      } catch (const std::exception&) {
        throw Error("add on key '" + k + "': its value is not an integer");
      }
    }
    v += delta;
    state_->put(k, std::to_string(v));
    state_->wake();
    reply(ok().i64(v).finish());
  }
  void compare_set(Reader& r) {
    auto& data = state_->data;
    std::string k = r.str();
    std::string expected = r.str();
    std::string desired = r.str();
    auto it = data.find(k);
    if (it == data.end() ? expected.empty() : it->second == expected) {
      state_->put(k, std::move(desired));
    }
    state_->wake();
    auto now = data.find(k);
    reply(ok().str(now == data.end() ? std::string() : now->second).finish());
  }
  void reply(std::string frame) {
    auto self = shared_from_this();
    auto out = std::make_shared<std::string>(std::move(frame));
    asio::async_write(socket_, asio::buffer(*out),
                      [this, self, out](const boost::system::error_code& ec, size_t) {
                        if (ec) return drop();
                        read_header();
                      });
  }
  void drop() {
    if (closed_) return;
    closed_ = true;
    auto self = shared_from_this();  // the containers below may hold the last other reference
    close();
    release_body();
    leave_pending();
    if (authed_) {
      --state_->connections;
    } else {
      ++state_->unauthenticated;  // rejected, evicted, or gone before it presented the secret
    }
    state_->sessions.erase(self);
  }

  tcp::socket socket_;
  StoreServer::State* state_;
  asio::steady_timer auth_timer_;
  bool authed_ = false, closed_ = false, in_pending_ = false;
  std::list<std::shared_ptr<Session>>::iterator pending_at_;
  std::string peer_;
  char header_[4];
  size_t expected_ = 0;  // the body's announced size
  std::string body_;     // what has arrived of it
  char chunk_[16384];
};

}  // namespace store_detail

void StoreServer::State::accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec) {
      if (stopped || ec == asio::error::operation_aborted) return;
    } else {
      socket.set_option(tcp::no_delay(true));
      // Room for one more connection that has not authenticated: the oldest such goes. A rank
      // sends its secret as it connects, so only idle or slow connections are ever evicted.
      while (!pending.empty() &&
             static_cast<int64_t>(pending.size()) >= std::max<int64_t>(1, limits.max_pending)) {
        pending.front()->reject(fmt::format(
            "evicted: {} connections were waiting to present the run's secret, the limit "
            "(FAULTLINE_STORE_MAX_PENDING)",
            pending.size()));
      }
      auto s = std::make_shared<Session>(std::move(socket), this);
      sessions.insert(s);
      s->start();
    }
    accept();
  });
}

StoreServer::StoreServer(const std::string& host, uint16_t port, StoreLimits limits,
                         std::string secret)
    : host_(host), state_(std::make_shared<State>(limits, std::move(secret))) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    throw BindError("rendezvous store: '" + host + "' is not an IP address (" + ec.message() + ")");
  }
  tcp::endpoint ep(addr, port);
  auto& acc = state_->acceptor;
  acc.open(ep.protocol(), ec);
  // Asio opens sockets without SOCK_CLOEXEC: what this rank starts (a JIT compiler) must not
  // inherit the store's listening socket.
  if (!ec) ::fcntl(acc.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) acc.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::string what = ec == asio::error::address_in_use
                           ? "address already in use (EADDRINUSE): another process holds it"
                           : ec.message();
    throw BindError(fmt::format("rendezvous store cannot listen on {}:{}: {}", host, port, what));
  }
}

StoreServer::StoreServer(const std::string& host, StoreLimits limits, std::string secret)
    : host_(host), state_(std::make_shared<State>(limits, std::move(secret))) {}

std::unique_ptr<StoreServer> StoreServer::adopt(int fd, const std::string& host, StoreLimits limits,
                                                std::string secret) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int listening = 0;
  socklen_t optlen = sizeof(listening);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) ||
      ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || listening == 0) {
    ::close(fd);
    throw BindError(fmt::format(
        "rendezvous store: descriptor {} from the launcher is not a listening TCP socket", fd));
  }
  std::unique_ptr<StoreServer> s(new StoreServer(host, limits, std::move(secret)));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // as the store's own socket: not for what this rank starts
  boost::system::error_code ec;
  s->state_->acceptor.assign(ss.ss_family == AF_INET ? tcp::v4() : tcp::v6(), fd, ec);
  if (ec) {
    ::close(fd);
    throw BindError("rendezvous store: cannot serve the launcher's socket: " + ec.message());
  }
  return s;
}

StoreServer::~StoreServer() {
  stop();
}

uint16_t StoreServer::port() const {
  boost::system::error_code ec;
  auto ep = state_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

StoreUsage StoreServer::usage() const {
  return {state_->key_count.load(),      state_->stored_bytes.load(), state_->buffered_bytes.load(),
          state_->refused.load(),        state_->connections.load(),  state_->pending_count.load(),
          state_->unauthenticated.load()};
}

void StoreServer::start() {
  state_->accept();
  auto state = state_;
  thread_ = std::thread([state] { state->io.run(); });
}

void StoreServer::stop() {
  if (!state_ || state_->stopped) return;
  auto state = state_;
  if (!thread_.joinable()) {  // never started: nothing runs on the io_context
    state->stopped = true;
    boost::system::error_code ec;
    state->acceptor.close(ec);
    return;
  }
  asio::post(state->io, [state] {
    state->stopped = true;
    boost::system::error_code ec;
    state->acceptor.close(ec);
    // Each ends as it would on its own, leaving the session set and the pending list.
    const std::vector<std::shared_ptr<Session>> all(state->sessions.begin(), state->sessions.end());
    for (auto& s : all) s->end();
    for (auto& w : state->waiters) w->timer->cancel();
    state->waiters.clear();
  });
  thread_.join();
}

}  // namespace fl::rdzv
