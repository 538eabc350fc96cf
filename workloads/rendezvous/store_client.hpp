// Client of the rendezvous store. Every call has a deadline. Connection failures are reported as
// what the socket really said: refused (nothing listening), connect timeout (SYN unanswered, e.g.
// dropped by a firewall), connection lost; a key that does not appear in time is a key timeout.
// Every connection first presents the run's secret (store_server.hpp); a server that closes the
// connection at that point did not take it (kUnauthenticated).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/settings.hpp"

namespace fl::rdzv {

FAULTLINE_SETTING(kMasterAddr, std::string, "MASTER_ADDR", "127.0.0.1",
                  "Address of the rendezvous store");
FAULTLINE_SETTING(kMasterPort, int64_t, "MASTER_PORT", 29500, "Port of the rendezvous store");
// The credential a store server checks and a client presents: FAULTLINE_CONTROL_SECRET, or ""
// for a worker started by hand without one (then only clients without one get in).
std::string store_secret_from_env();

FAULTLINE_SETTING(kStoreTimeoutMs, int64_t, "FAULTLINE_STORE_TIMEOUT_MS", 30000,
                  "Deadline of each store call and of connecting to the store");

enum class StoreErrorKind {
  kRefused,          // ECONNREFUSED until the connect deadline
  kConnectTimeout,   // no answer to connect before the deadline
  kResolve,          // the address cannot be resolved
  kKeyTimeout,       // get/wait: the keys did not appear in time
  kConnectionLost,   // the server closed or reset the connection mid-call
  kCallTimeout,      // the server did not answer a call before its deadline
  kServer,           // the server answered with an error
  kUnauthenticated,  // the server closed the connection at the secret: not the run's, or none
};

class StoreError : public Error {
 public:
  StoreError(StoreErrorKind kind, std::string msg) : Error(std::move(msg)), kind_(kind) {}
  StoreErrorKind kind() const { return kind_; }

 private:
  StoreErrorKind kind_;
};

class StoreClient {
 public:
  using ms = std::chrono::milliseconds;

  // Connects, retrying a refused connection until `connect_timeout` (the server may start later
  // than its clients, as with torch's TCPStore), and presents `secret` (default: the run's,
  // FAULTLINE_CONTROL_SECRET) before anything else.
  StoreClient(const std::string& host, uint16_t port, ms timeout = ms(kStoreTimeoutMs.get()),
              ms connect_timeout = ms(kStoreTimeoutMs.get()),
              const std::string& secret = store_secret_from_env());
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits up to `timeout` (default: the client's) for the key to exist.
  std::string get(const std::string& key, ms timeout = ms(-1));
  void wait(const std::vector<std::string>& keys, ms timeout = ms(-1));
  int64_t add(const std::string& key, int64_t delta);
  // Sets `desired` if the current value equals `expected` ("" matches a missing key); returns the
  // value after the call.
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool check(const std::vector<std::string>& keys);
  bool remove(const std::string& key);
  int64_t num_keys();

  const std::string& endpoint() const { return endpoint_; }
  ms timeout() const { return timeout_; }

 private:
  struct Conn;
  void connect(const std::string& host, uint16_t port, ms connect_timeout);
  void authenticate(const std::string& secret);
  std::string call(const std::string& frame, ms deadline, const char* what);
  std::string endpoint_;
  ms timeout_;
  std::unique_ptr<Conn> conn_;
};

}  // namespace fl::rdzv
