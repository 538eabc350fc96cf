// Artifact fetches against the harness's hub: one download per node cache (concurrent ranks
// included), and each way a fetch fails says so with the URL. The hub serves only requests with
// the run's secret, and clients that connect and say nothing never keep a rank out.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/run/artifact_server.hpp"
#include "tests/support/scratch.hpp"
#include "workloads/rendezvous/artifacts.hpp"

namespace fl {
namespace {
namespace fs = std::filesystem;

// The run's secret: what the hub asks for, and what a rank has in FAULTLINE_CONTROL_SECRET.
const std::string kSecret = "0123456789abcdef0123456789abcdef";

struct Hub {
  fs::path root, cache;
  Hub() {
    const fs::path base = fl::test::removed_at_exit(
        fs::temp_directory_path() / ("faultline-artifacts-test-" + std::to_string(::getpid())));
    fs::remove_all(base);
    root = base / "hub";
    cache = base / "cache";
    fs::create_directories(root);
    std::ofstream(root / "tokenizer.json") << R"({"kind": "synthetic-chain", "vocab": 96})";
    ::setenv("FAULTLINE_ARTIFACT_CACHE", cache.c_str(), 1);
    ::setenv("FAULTLINE_CONTROL_SECRET", kSecret.c_str(), 1);
  }
  ~Hub() { ::unsetenv("FAULTLINE_CONTROL_SECRET"); }
};

std::string error_of(const std::string& name) {
  try {
    rdzv::fetch_artifact(name);
  } catch (const rdzv::ArtifactError& e) {
    return e.what();
  }
  return "";
}

TEST(Artifacts, ConcurrentRanksDownloadOnceIntoTheNodeCache) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  const std::string url = server.start();
  ::setenv("FAULTLINE_ARTIFACT_URL", url.c_str(), 1);
  std::vector<std::string> paths(4);
  std::vector<std::thread> ranks;
  for (size_t i = 0; i < paths.size(); ++i) {
    ranks.emplace_back([&, i] { paths[i] = rdzv::fetch_artifact("tokenizer.json"); });
  }
  for (auto& t : ranks) t.join();
  for (auto& p : paths) EXPECT_EQ(p, (hub.cache / "tokenizer.json").string());
  EXPECT_EQ(server.requests(), 1);
  EXPECT_EQ(rdzv::tokenizer_vocab(paths[0]), 96);
}

TEST(Artifacts, AMissingFileIsAnHttp404NamingTheUrl) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  const std::string url = server.start() + "/models";
  ::setenv("FAULTLINE_ARTIFACT_URL", url.c_str(), 1);
  const std::string err = error_of("weights.bin");
  EXPECT_NE(err.find("cannot fetch artifact 'weights.bin' after 3 attempts"), std::string::npos)
      << err;
  EXPECT_NE(err.find("/models/weights.bin: HTTP 404 Not Found"), std::string::npos) << err;
  EXPECT_EQ(server.requests(), 3);
  EXPECT_FALSE(fs::exists(hub.cache / "weights.bin"));
}

TEST(Artifacts, AMirrorThatIsNotRunningIsRefusedThreeTimes) {
  Hub hub;
  ::setenv("FAULTLINE_ARTIFACT_URL", "http://127.0.0.1:9", 1);
  const std::string err = error_of("tokenizer.json");
  EXPECT_NE(err.find("http://127.0.0.1:9/tokenizer.json: Connection refused"), std::string::npos)
      << err;
}

TEST(Artifacts, ACachedFileNeedsNoNetworkAndABadUrlIsNamed) {
  Hub hub;
  ::setenv("FAULTLINE_ARTIFACT_URL", "ftp://mirror", 1);
  EXPECT_NE(error_of("tokenizer.json").find("is not an http://HOST[:PORT] URL"), std::string::npos);
  fs::create_directories(hub.cache);
  fs::copy(hub.root / "tokenizer.json", hub.cache / "tokenizer.json");
  EXPECT_EQ(rdzv::fetch_artifact("tokenizer.json"), (hub.cache / "tokenizer.json").string());
}

// A connected loopback socket to the hub at `url` (http://127.0.0.1:PORT), with a 30 s receive
// limit so a test never hangs.
int connect_to(const std::string& url) {
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  return fd;
}

// The whole answer to a raw request line, as a hostile client would send it (with the run's
// secret unless told otherwise).
std::string raw_request(const std::string& url, const std::string& line,
                        const std::string& auth = "Authorization: Bearer " + kSecret + "\r\n") {
  const int fd = connect_to(url);
  const std::string req = line + "\r\nHost: 127.0.0.1\r\n" + auth + "\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(ArtifactHub, ServesOnlyDeclaredNamesAndNoPathEverLeavesThem) {
  Hub hub;
  std::ofstream(hub.root / "undeclared.txt") << "hub-private-content";
  std::ofstream(hub.root.parent_path() / "outside.txt") << "outside-content";
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  const std::string url = server.start();
  const std::string ok = raw_request(url, "GET /tokenizer.json HTTP/1.1");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK", 0), 0u) << ok;
  EXPECT_NE(ok.find("synthetic-chain"), std::string::npos) << ok;
  const std::vector<std::string> targets = {"//etc/shadow",
                                            "//etc/passwd",
                                            "/etc/passwd",
                                            "/../outside.txt",
                                            "/..//outside.txt",
                                            "/%2e%2e/outside.txt",
                                            "/..%2foutside.txt",
                                            "/%2E%2E%2Foutside.txt",
                                            "/undeclared.txt",
                                            "/./tokenizer.json",
                                            "//tokenizer.json",
                                            "/tokenizer.json/",
                                            "/tokenizer.json?x=..",
                                            "/%74okenizer.json",
                                            "/tokenizer.json%00",
                                            "/",
                                            "",
                                            "tokenizer.json",
                                            "http://127.0.0.1/tokenizer.json",
                                            "/..\\outside.txt",
                                            "/" + hub.root.string() + "/undeclared.txt"};
  for (const std::string& target : targets) {
    const std::string r = raw_request(url, "GET " + target + " HTTP/1.1");
    const bool refused = r.rfind("HTTP/1.1 404", 0) == 0 || r.rfind("HTTP/1.1 400", 0) == 0;
    EXPECT_TRUE(refused) << "[" << target << "] " << r;
    for (const char* secret : {"root:", "hub-private-content", "outside-content", "synthetic"}) {
      EXPECT_EQ(r.find(secret), std::string::npos) << "[" << target << "] leaked: " << r;
    }
  }
  EXPECT_EQ(raw_request(url, "POST /tokenizer.json HTTP/1.1").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_THROW(harness::ArtifactServer(hub.root.string(), {"../x"}, kSecret), Error);
  EXPECT_THROW(harness::ArtifactServer(hub.root.string(), {".."}, kSecret), Error);
  EXPECT_THROW(harness::ArtifactServer(hub.root.string(), {"tokenizer.json"}, ""), Error);
}

TEST(ArtifactHub, AnIdleClientBlocksNoOtherDownloadAndIsDroppedAtItsDeadline) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  server.set_io_timeout(std::chrono::milliseconds(500));
  const std::string url = server.start();
  ::setenv("FAULTLINE_ARTIFACT_URL", url.c_str(), 1);
  // Two clients hold connections: one sends nothing, one half a request line.
  const int idle = connect_to(url);
  const int partial = connect_to(url);
  ASSERT_GE(idle, 0);
  ASSERT_GE(partial, 0);
  ::send(partial, "GET /tok", 8, MSG_NOSIGNAL);
  // A rank's download goes through meanwhile.
  EXPECT_EQ(rdzv::fetch_artifact("tokenizer.json"), (hub.cache / "tokenizer.json").string());
  // Both are closed by the hub (end of stream, not our 30 s receive limit), with no answer.
  for (int fd : {idle, partial}) {
    char c;
    errno = 0;
    EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << std::strerror(errno);
    ::close(fd);
  }
}

TEST(ArtifactHub, ARequestWithoutTheRunsSecretIsAnswered401BeforeItsPathIsLookedAt) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  const std::string url = server.start();
  const std::string wrong = kSecret.substr(0, kSecret.size() - 1) + "0";
  const std::vector<std::string> auths = {"",
                                          "Authorization: Bearer " + wrong + "\r\n",
                                          "Authorization: Bearer " + kSecret + "0\r\n",
                                          "Authorization: Bearer\r\n",
                                          "Authorization: Basic " + kSecret + "\r\n",
                                          "Authorization: " + kSecret + "\r\n",
                                          "X-Authorization: Bearer " + kSecret + "\r\n"};
  for (const std::string& auth : auths) {
    for (const char* line : {"GET /tokenizer.json HTTP/1.1", "GET /nope HTTP/1.1", "BREW / x"}) {
      const std::string r = raw_request(url, line, auth);
      EXPECT_EQ(r.rfind("HTTP/1.1 401 Unauthorized\r\n", 0), 0u) << "[" << auth << "] " << r;
      EXPECT_EQ(r.find("synthetic"), std::string::npos) << "[" << auth << "] leaked: " << r;
    }
  }
  EXPECT_EQ(server.unauthorized(), 21);
  EXPECT_EQ(server.requests(), 0);
  // Header names are case-insensitive: a rank's own client may spell it either way.
  EXPECT_EQ(
      raw_request(url, "GET /tokenizer.json HTTP/1.1", "authorization: Bearer " + kSecret + "\r\n")
          .rfind("HTTP/1.1 200 OK", 0),
      0u);
  // A rank with another secret, or none, is told which.
  ::setenv("FAULTLINE_ARTIFACT_URL", url.c_str(), 1);
  ::setenv("FAULTLINE_CONTROL_SECRET", wrong.c_str(), 1);
  std::string err = error_of("tokenizer.json");
  EXPECT_NE(err.find(url + "/tokenizer.json: HTTP 401 Unauthorized (the hub serves only requests "
                           "with the run's secret, FAULTLINE_CONTROL_SECRET, and this one is not "
                           "it)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find(wrong), std::string::npos) << "the secret is never printed";
  ::unsetenv("FAULTLINE_CONTROL_SECRET");
  err = error_of("tokenizer.json");
  EXPECT_NE(err.find("FAULTLINE_CONTROL_SECRET, which this process lacks)"), std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(hub.cache / "tokenizer.json"));
}

TEST(ArtifactHub, SeventyIdleConnectionsKeepNoRankOut) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  server.set_io_timeout(std::chrono::milliseconds(600000));  // only eviction closes them here
  const std::string url = server.start();
  ::setenv("FAULTLINE_ARTIFACT_URL", url.c_str(), 1);
  // Another user's 70 connections that never send a request (once: every rank of a run failed).
  std::vector<int> idle;
  for (int i = 0; i < 70; ++i) {
    idle.push_back(connect_to(url));
    ASSERT_GE(idle.back(), 0);
  }
  EXPECT_EQ(rdzv::fetch_artifact("tokenizer.json"), (hub.cache / "tokenizer.json").string());
  EXPECT_EQ(server.requests(), 1);
  // The rank's connection made room by cutting the oldest idle one: 71 came, 16 may wait. An idle
  // connection whose handshake the kernel held back while the accept queue was full can reach
  // the hub after the rank's (seen once in CI on a loaded machine): wait, bounded, for all 71.
  const int want = 71 - harness::ArtifactServer::kMaxPending;
  for (int i = 0; i < 500 && server.evicted() < want; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.evicted(), want);
  for (int i = 0; i < server.evicted(); ++i) {
    char c;
    EXPECT_EQ(::recv(idle[i], &c, 1, 0), 0) << "connection " << i << " was answered";
  }
  for (int fd : idle) ::close(fd);
}

// Seeded fuzz of request heads, with and without the secret: each is answered with a status or
// closed, the file leaves only with the secret, and the hub serves a rank afterwards.
TEST(ArtifactHub, RandomRequestHeadsNeverCrashItAndNeverLeakWithoutTheSecret) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  server.set_io_timeout(std::chrono::milliseconds(300));
  const std::string url = server.start();
  uint64_t x = 0x2545f4914f6cdd1dull;  // xorshift: the same heads on every run
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::vector<std::string> parts = {
      "GET ",    "/tokenizer.json", " HTTP/1.1", "\r\n", ":", "Authorization",
      "Bearer ", kSecret,           " ",         "\t",   "\0"};
  int with_secret = 0;
  for (int i = 0; i < 200; ++i) {
    std::string head;
    for (uint64_t n = next() % 12; n > 0; --n) {
      head += next() % 3 ? parts[next() % parts.size()] : std::string(1, static_cast<char>(next()));
    }
    const bool sent_secret = head.find(kSecret) != std::string::npos;
    with_secret += sent_secret;
    const int fd = connect_to(url);
    ASSERT_GE(fd, 0);
    if (next() % 2) head += "\r\n\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);  // an unfinished head ends here, not at the hub's deadline
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
      out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    EXPECT_TRUE(out.empty() || out.rfind("HTTP/1.1 ", 0) == 0) << i;
    if (!sent_secret) EXPECT_EQ(out.find("synthetic"), std::string::npos) << i << ": " << head;
  }
  EXPECT_GT(with_secret, 0);
  ::setenv("FAULTLINE_ARTIFACT_URL", url.c_str(), 1);
  EXPECT_EQ(rdzv::fetch_artifact("tokenizer.json"), (hub.cache / "tokenizer.json").string());
}

TEST(ArtifactHub, ChildrenInheritNoneOfItsSockets) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"}, kSecret);
  const std::string url = server.start();
  const int flags = ::fcntl(server.listen_fd(), F_GETFD);
  EXPECT_TRUE(flags & FD_CLOEXEC);
  // With a connection open at the hub, a child started now holds no socket at all.
  const int held = connect_to(url);
  ASSERT_GE(held, 0);
  const std::string fds = run_tool({"ls", "-l", "/proc/self/fd/"});
  EXPECT_EQ(fds.find("socket:"), std::string::npos) << fds;
  ::close(held);
}

TEST(LaunchArgs, TheRendezvousPortIsChosenBelowTheEphemeralRange) {
  int low = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  if (low <= 12000) GTEST_SKIP() << "no room below the ephemeral range (" << low << ")";
  for (int i = 0; i < 20; ++i) {
    const int port = harness::free_port();
    EXPECT_GE(port, 10000);
    EXPECT_LT(port, low);
  }
}

}  // namespace
}  // namespace fl
