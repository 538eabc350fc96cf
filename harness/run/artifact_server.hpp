// The run's artifact hub: a small HTTP/1.1 server on 127.0.0.1 that serves the files a scenario
// declares (GET /<name>), the way a model hub or mirror serves a tokenizer. Ranks fetch from it
// at start when the scenario lists workload.fetch.
//
// Anything on the host can connect, so every request must carry the run's secret
// (`Authorization: Bearer SECRET`, what ranks have in FAULTLINE_CONTROL_SECRET); one without it is
// answered 401 and closed, before its path is looked at. Only the declared names are served,
// matched exactly: a request path is never joined to the directory, so `..`, absolute paths, `//`,
// percent-encoding and the like are all 404. Each connection has its own thread and a read/write
// deadline, so one idle or slow client never holds up another; connections that have not yet sent
// a whole request are few (kMaxPending) and a new one evicts the oldest, so clients that connect
// and say nothing never keep a rank out. Every socket it opens is close-on-exec: ranks started
// while it listens do not inherit it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fl::harness {

class ArtifactServer {
 public:
  // Serves root/<name> for each of `names` (plain file names: no '/', not "." or "..") to
  // requests that carry `secret` (Error when it is empty).
  ArtifactServer(std::string root, std::vector<std::string> names, std::string secret);
  ~ArtifactServer();
  ArtifactServer(const ArtifactServer&) = delete;
  ArtifactServer& operator=(const ArtifactServer&) = delete;

  // How long a connection may take to send its request (from its connection), and each write of
  // the answer.
  void set_io_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  // Listens on 127.0.0.1 (an ephemeral port) and serves until destroyed; returns the base URL.
  std::string start();
  int requests() const { return requests_.load(); }          // with the secret
  int unauthorized() const { return unauthorized_.load(); }  // answered 401
  int evicted() const { return evicted_.load(); }  // closed unanswered to make room (kMaxPending)
  int listen_fd() const { return listen_fd_; }

  static constexpr int kMaxPending = 16;  // connections still sending their request

 private:
  void accept_loop();
  void serve(int fd);
  bool send_all(int fd, const std::string& data);

  std::string answer(const std::string& head);

  std::string root_;
  std::set<std::string> names_;
  std::string secret_;
  std::chrono::milliseconds timeout_{2000};
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::atomic<int> requests_{0}, unauthorized_{0}, evicted_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<int> open_;      // connections being served (each by its own detached thread)
  std::list<int> pending_;  // those of them still sending their request, oldest first
};

}  // namespace fl::harness
