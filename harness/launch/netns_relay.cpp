// The relay of netns_relay.hpp: one listening socket made inside the hub namespace, and a
// Boost.Asio loop of its own that copies each accepted connection to and from the loopback port.
#include "harness/launch/netns_relay.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <boost/asio.hpp>

#include "base/error.hpp"

namespace fl::harness {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// A listening socket on addr:0 inside `netns`, made by a thread that enters the namespace (a
// thread's network namespace is its own; the socket keeps the namespace it was made in). The fd,
// or -1 with `why`.
int listen_in_namespace(const std::string& netns, const std::string& addr, std::string& why) {
  int out = -1;
  std::thread t([&] {
    const int ns = ::open(netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) {
      why = fmt::format("entering {}: {}", netns, std::strerror(errno));
      if (ns >= 0) ::close(ns);
      return;
    }
    ::close(ns);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1 ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 1024) != 0) {
      why = fmt::format("listening on {} in {}: {}", addr, netns, std::strerror(errno));
      if (fd >= 0) ::close(fd);
      return;
    }
    out = fd;
  });
  t.join();
  return out;
}

// One relayed connection: both sockets live while either direction still copies.
struct RelayedPair : std::enable_shared_from_this<RelayedPair> {
  explicit RelayedPair(const asio::any_io_executor& ex) : a(ex), b(ex) {}
  tcp::socket a, b;
  std::array<char, 65536> ab{}, ba{};

  void close() {
    boost::system::error_code ec;
    a.close(ec);
    b.close(ec);
  }
  // Copies from -> to through buf until either side ends, then closes both.
  void copy(tcp::socket& from, tcp::socket& to, std::array<char, 65536>& buf) {
    from.async_read_some(asio::buffer(buf), [self = shared_from_this(), &from, &to, &buf](
                                                const boost::system::error_code& ec, size_t n) {
      if (ec) return self->close();
      asio::async_write(to, asio::buffer(buf.data(), n),
                        [self, &from, &to, &buf](const boost::system::error_code& wec, size_t) {
                          if (wec) return self->close();
                          self->copy(from, to, buf);
                        });
    });
  }
};

// Accepts the next connection on `acceptor` (and then the next), each relayed to `to`.
void accept_next(tcp::acceptor& acceptor, const tcp::endpoint& to) {
  auto p = std::make_shared<RelayedPair>(acceptor.get_executor());
  acceptor.async_accept(p->a, [&acceptor, to, p](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      p->b.async_connect(to, [p](const boost::system::error_code& cec) {
        if (cec) return p->close();
        p->copy(p->a, p->b, p->ab);
        p->copy(p->b, p->a, p->ba);
      });
    }
    accept_next(acceptor, to);
  });
}

}  // namespace

struct NetnsRelay::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
};

NetnsRelay::NetnsRelay(const std::string& netns, const std::string& addr, uint16_t to_port)
    : impl_(std::make_unique<Impl>()) {
  std::string why;
  const int fd = listen_in_namespace(netns, addr, why);
  if (fd < 0) raise<Error>("PMIx relay: {}", why);
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  impl_->acceptor.assign(tcp::v4(), fd);
  accept_next(impl_->acceptor, tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), to_port));
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

NetnsRelay::~NetnsRelay() {
  impl_->io.stop();
  impl_->thread.join();
}

}  // namespace fl::harness
