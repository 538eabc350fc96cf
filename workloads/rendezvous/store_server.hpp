// The rendezvous store server: a TCP key-value store in the style of torch's TCPStore, on
// Boost.Asio with one I/O thread. Waiting calls (get, wait) park on the server and are woken by
// the set/add/compare-set that creates their keys, or answered with a timeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "base/error.hpp"

namespace fl::rdzv {

// Binding failed: address in use, permission, bad address. Carries the errno-style reason.
class BindError : public Error {
 public:
  using Error::Error;
};

class StoreServer {
 public:
  // Binds and listens at once (so "address in use" surfaces here); serves after start().
  // port 0 picks a free port (see port()).
  StoreServer(const std::string& host, uint16_t port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  void start();  // runs the I/O thread
  void stop();   // closes every connection and joins; idempotent
  uint16_t port() const;
  const std::string& host() const { return host_; }

  struct State;  // defined in store_server.cpp

 private:
  std::string host_;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace fl::rdzv
