#include "harness/run/artifact_server.hpp"

#include <sys/socket.h>

#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace fl::harness {

namespace http = boost::beast::http;
using boost::asio::ip::tcp;

struct ArtifactServer::Impl {
  boost::asio::io_context io;
  tcp::acceptor acceptor{io};
};

ArtifactServer::ArtifactServer(std::string root)
    : root_(std::move(root)), impl_(std::make_unique<Impl>()) {}

ArtifactServer::~ArtifactServer() {
  stopping_ = true;
  boost::system::error_code ec;
  // A blocking accept() is not woken by close(); shutdown() of the listening socket is.
  if (impl_->acceptor.is_open()) ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->acceptor.close(ec);
  impl_->io.stop();
  if (thread_.joinable()) thread_.join();
}

std::string ArtifactServer::start() {
  tcp::endpoint ep(boost::asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  const int port = impl_->acceptor.local_endpoint().port();
  thread_ = std::thread([this] { serve(); });
  return fmt::format("http://127.0.0.1:{}", port);
}

void ArtifactServer::serve() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket sock(impl_->io);
    impl_->acceptor.accept(sock, ec);
    if (ec || stopping_) return;  // shut down: the run is over
    boost::beast::flat_buffer buf;
    http::request<http::empty_body> req;
    http::read(sock, buf, req, ec);
    if (ec) continue;
    ++requests_;
    http::response<http::string_body> res;
    res.version(req.version());
    res.set(http::field::server, "faultline-artifacts");
    res.keep_alive(false);
    std::string target(req.target());
    const bool safe = !target.empty() && target[0] == '/' && target.find("..") == std::string::npos;
    const std::filesystem::path file = std::filesystem::path(root_) / target.substr(1);
    std::ifstream in(file, std::ios::binary);
    if (req.method() != http::verb::get || !safe || !in || std::filesystem::is_directory(file)) {
      res.result(req.method() != http::verb::get ? http::status::method_not_allowed
                                                 : http::status::not_found);
      res.body() = "not found\n";
    } else {
      res.result(http::status::ok);
      res.body().assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    res.prepare_payload();
    http::write(sock, res, ec);
    sock.shutdown(tcp::socket::shutdown_both, ec);
  }
}

}  // namespace fl::harness
