// A TCP relay from inside a run's hub network namespace to this process's loopback: how ranks in
// network namespaces reach the harness's PMIx server, which PMIx 4.2 lets listen only where its
// first run was (one server per process, its listener fixed at PMIx_server_init: loopback).
//
// The listener is a socket made inside the hub namespace (a thread that enters it, binds and
// leaves), so it is reachable only from the run's own namespaces, never from the host's network
// or its other users; it ends with the relay (the run), and each connection it accepted is
// copied both ways to 127.0.0.1:`to_port` until either side closes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace fl::harness {

class NetnsRelay {
 public:
  // Listens on `addr` (a port the kernel picks) inside the network namespace `netns` (a
  // /proc/PID/ns/net path). Throws Error naming the namespace and the call that failed.
  NetnsRelay(const std::string& netns, const std::string& addr, uint16_t to_port);
  ~NetnsRelay();
  NetnsRelay(const NetnsRelay&) = delete;
  NetnsRelay& operator=(const NetnsRelay&) = delete;

  uint16_t port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace fl::harness
