#include "harness/run/artifact_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "base/error.hpp"

namespace fl::harness {

namespace {

std::string response(int code, const char* reason, const std::string& body,
                     const char* extra = "") {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nServer: faultline-artifacts\r\n{}Content-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      code, reason, extra, body.size(), body);
}

// The value of the request head's first Authorization header ("" when there is none).
std::string authorization(const std::string& head) {
  size_t at = head.find("\r\n");
  while (at != std::string::npos && at + 2 < head.size()) {
    const size_t start = at + 2;
    const size_t end = head.find("\r\n", start);
    const std::string line = head.substr(start, end == std::string::npos ? end : end - start);
    if (line.empty()) break;  // the end of the head
    const size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (colon != std::string::npos && name == "authorization") {
      const size_t b = line.find_first_not_of(" \t", colon + 1);
      const size_t e = line.find_last_not_of(" \t");
      return b == std::string::npos ? "" : line.substr(b, e - b + 1);
    }
    at = end;
  }
  return "";
}

}  // namespace

ArtifactServer::ArtifactServer(std::string root, std::vector<std::string> names, std::string secret)
    : root_(std::move(root)), secret_(std::move(secret)) {
  if (secret_.empty()) raise<Error>("artifact hub: no secret to ask requests for");
  for (auto& n : names) {
    if (n.empty() || n == "." || n == ".." || n.find('/') != std::string::npos ||
        n.find('\0') != std::string::npos) {
      raise<Error>("artifact hub: '{}' is not a plain file name", n);
    }
    names_.insert(n);
  }
}

ArtifactServer::~ArtifactServer() {
  stopping_ = true;
  // A blocking accept() is not woken by close(); shutdown() of the listening socket is.
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  std::unique_lock lock(mu_);
  for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  cv_.wait(lock, [&] { return open_.empty(); });
}

std::string ArtifactServer::start() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) raise<Error>("artifact hub: socket: {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(listen_fd_, SOMAXCONN) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    raise<Error>("artifact hub: cannot listen on 127.0.0.1: {}", std::strerror(errno));
  }
  acceptor_ = std::thread([this] { accept_loop(); });
  return fmt::format("http://127.0.0.1:{}", ntohs(a.sin_port));
}

void ArtifactServer::accept_loop() {
  while (!stopping_) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down: the run is over
    }
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      continue;
    }
    // Room for one more connection that has not sent its request: the oldest such is cut (its
    // thread sees the end of its stream). A rank sends its request as it connects.
    if (pending_.size() >= static_cast<size_t>(kMaxPending)) {
      ::shutdown(pending_.front(), SHUT_RDWR);
      pending_.pop_front();
      ++evicted_;
    }
    open_.insert(fd);
    pending_.push_back(fd);
    std::thread([this, fd] { serve(fd); }).detach();
  }
}

bool ArtifactServer::send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_.count())) <= 0) return false;
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void ArtifactServer::serve(int fd) {
  // The request head, read within one deadline (a client that sends nothing, or a byte at a
  // time, is dropped) and at most 8 KiB.
  std::string head;
  const auto until = std::chrono::steady_clock::now() + timeout_;
  bool complete = false;
  while (!complete && head.size() < 8192 && !stopping_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    char buf[2048];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
    complete = head.find("\r\n\r\n") != std::string::npos;
  }
  {
    std::lock_guard lock(mu_);
    pending_.remove(fd);  // (already gone if it was evicted)
  }
  if (complete) send_all(fd, answer(head));
  ::shutdown(fd, SHUT_RDWR);
  std::lock_guard lock(mu_);
  ::close(fd);
  open_.erase(fd);
  cv_.notify_all();
}

std::string ArtifactServer::answer(const std::string& head) {
  // The secret first: a request without it learns nothing, not even whether a name exists.
  const std::string auth = authorization(head);
  if (auth.rfind("Bearer ", 0) != 0 || !secrets_equal(auth.substr(7), secret_)) {
    ++unauthorized_;
    return response(401, "Unauthorized", "the run's secret is required\n",
                    "WWW-Authenticate: Bearer realm=\"faultline\"\r\n");
  }
  ++requests_;
  // Request line: METHOD SP TARGET SP VERSION. The target is compared, never joined.
  const std::string line = head.substr(0, head.find("\r\n"));
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    return response(400, "Bad Request", "bad request\n");
  }
  if (line.substr(0, sp1) != "GET") return response(405, "Method Not Allowed", "only GET\n");
  const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string name = target.empty() ? "" : target.substr(1);
  if (target.size() > 1 && target[0] == '/' && names_.count(name)) {
    std::ifstream in(root_ + "/" + name, std::ios::binary);
    if (in) {
      return response(
          200, "OK",
          std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    }
  }
  return response(404, "Not Found", "not found\n");
}

}  // namespace fl::harness
