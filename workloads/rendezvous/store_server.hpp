// The rendezvous store server: a TCP key-value store in the style of torch's TCPStore, on
// Boost.Asio with one I/O thread. Waiting calls (get, wait) park on the server and are woken by
// the set/add/compare-set that creates their keys, or answered with a timeout.
// Anything on the host (or the network) can connect, so every connection first presents the run's
// secret (FAULTLINE_CONTROL_SECRET) in a small kAuth frame within a short deadline; until then it
// is one of a few pending connections (the oldest is evicted for a newcomer) and holds no more
// than that frame. A connection that fails or is too slow is closed without an answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "base/error.hpp"
#include "base/settings.hpp"
#include "workloads/rendezvous/store_client.hpp"  // store_secret_from_env

namespace fl::rdzv {

// What one store keeps and accepts (read when a server is constructed). A request is read as its
// bytes arrive, so an announced size costs nothing until the data is there.
FAULTLINE_SETTING(kStoreMaxMessage, int64_t, "FAULTLINE_STORE_MAX_MESSAGE", 1 << 20,
                  "Largest rendezvous store request in bytes (a larger announced size is "
                  "refused with an error and the connection closed)");
FAULTLINE_SETTING(kStoreMaxKeys, int64_t, "FAULTLINE_STORE_MAX_KEYS", 65536,
                  "Most keys the rendezvous store keeps (a set creating one more is refused)");
FAULTLINE_SETTING(kStoreMaxBytes, int64_t, "FAULTLINE_STORE_MAX_BYTES", 64 << 20,
                  "Most bytes of keys and values the rendezvous store keeps in all");
FAULTLINE_SETTING(kStoreMaxBuffered, int64_t, "FAULTLINE_STORE_MAX_BUFFERED", 64 << 20,
                  "Most request bytes the rendezvous store holds at once across all connections "
                  "(the request that would pass it is refused and its connection closed)");
FAULTLINE_SETTING(kStoreMaxConnections, int64_t, "FAULTLINE_STORE_MAX_CONNECTIONS", 4096,
                  "Most authenticated connections the rendezvous store serves at once (one more "
                  "is answered with an error and closed)");
FAULTLINE_SETTING(kStoreMaxPending, int64_t, "FAULTLINE_STORE_MAX_PENDING", 16,
                  "Most connections the rendezvous store holds before they present the run's "
                  "secret (a new one evicts the oldest)");
FAULTLINE_SETTING(kStoreAuthTimeoutMs, int64_t, "FAULTLINE_STORE_AUTH_TIMEOUT_MS", 2000,
                  "How long a new rendezvous store connection has to present the run's secret "
                  "before it is closed");

// The store's limits; defaults from the settings above.
struct StoreLimits {
  int64_t max_message = kStoreMaxMessage.get();
  int64_t max_keys = kStoreMaxKeys.get();
  int64_t max_bytes = kStoreMaxBytes.get();
  int64_t max_buffered = kStoreMaxBuffered.get();
  int64_t max_connections = kStoreMaxConnections.get();
  int64_t max_pending = kStoreMaxPending.get();
  int64_t auth_timeout_ms = kStoreAuthTimeoutMs.get();
};

// What the store holds now (read from any thread).
struct StoreUsage {
  int64_t keys = 0;
  int64_t stored_bytes = 0;    // keys and values kept
  int64_t buffered_bytes = 0;  // request bytes received and not yet handled, all connections
  int64_t refused = 0;         // requests refused for a limit
  int64_t connections = 0;     // authenticated connections open now
  int64_t pending = 0;         // connections open now that have not presented the secret yet
  int64_t unauthenticated = 0;  // connections closed before they presented the secret: wrong
                                // or none, too slow, evicted, or gone
};

// Binding failed: address in use, permission, bad address. Carries the errno-style reason.
class BindError : public Error {
 public:
  using Error::Error;
};

class StoreServer {
 public:
  // Binds and listens at once (so "address in use" surfaces here); serves after start().
  // port 0 picks a free port (see port()). Clients must present `secret`.
  StoreServer(const std::string& host, uint16_t port, StoreLimits limits = {},
              std::string secret = store_secret_from_env());
  // Serves on a socket a launcher already bound and listens on (torchrun's agent store; here
  // fl-launch's, passed in FAULTLINE_STORE_LISTEN_FD). Takes ownership of `fd`; BindError when it
  // is not a listening TCP socket.
  static std::unique_ptr<StoreServer> adopt(int fd, const std::string& host,
                                            StoreLimits limits = {},
                                            std::string secret = store_secret_from_env());
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  void start();  // runs the I/O thread
  void stop();   // closes every connection and joins; idempotent
  uint16_t port() const;
  const std::string& host() const { return host_; }
  StoreUsage usage() const;

  struct State;  // defined in store_server.cpp

 private:
  StoreServer(const std::string& host, StoreLimits limits, std::string secret);
  std::string host_;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace fl::rdzv
