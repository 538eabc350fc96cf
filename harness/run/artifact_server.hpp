// The run's artifact hub: a small HTTP/1.1 server on 127.0.0.1 that serves the files of one
// directory (GET /<name>), the way a model hub or mirror serves a tokenizer. Ranks fetch from it
// at start when the scenario lists workload.fetch.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

namespace fl::harness {

class ArtifactServer {
 public:
  explicit ArtifactServer(std::string root);
  ~ArtifactServer();
  ArtifactServer(const ArtifactServer&) = delete;
  ArtifactServer& operator=(const ArtifactServer&) = delete;

  // Listens on 127.0.0.1 (an ephemeral port) and serves until destroyed; returns the base URL.
  std::string start();
  int requests() const { return requests_.load(); }

 private:
  void serve();

  std::string root_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::atomic<int> requests_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace fl::harness
