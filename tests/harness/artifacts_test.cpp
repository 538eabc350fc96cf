// Artifact fetches against the harness's hub: one download per node cache (concurrent ranks
// included), and each way a fetch fails says so with the URL.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/subprocess.hpp"
#include "harness/run/artifact_server.hpp"
#include "harness/run/launch_args.hpp"
#include "workloads/rendezvous/artifacts.hpp"

namespace fl {
namespace {
namespace fs = std::filesystem;

struct Hub {
  fs::path root, cache;
  Hub() {
    const fs::path base =
        fs::temp_directory_path() / ("faultline-artifacts-test-" + std::to_string(::getpid()));
    fs::remove_all(base);
    root = base / "hub";
    cache = base / "cache";
    fs::create_directories(root);
    std::ofstream(root / "tokenizer.json") << R"({"kind": "synthetic-chain", "vocab": 96})";
    ::setenv("FAULTLINE_ARTIFACT_CACHE", cache.c_str(), 1);
  }
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
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"});
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
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"});
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

// The whole answer to a raw request line, as a hostile client would send it.
std::string raw_request(const std::string& url, const std::string& line) {
  const int fd = connect_to(url);
  const std::string req = line + "\r\nHost: 127.0.0.1\r\n\r\n";
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
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"});
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
  EXPECT_THROW(harness::ArtifactServer(hub.root.string(), {"../x"}), Error);
  EXPECT_THROW(harness::ArtifactServer(hub.root.string(), {".."}), Error);
}

TEST(ArtifactHub, AnIdleClientBlocksNoOtherDownloadAndIsDroppedAtItsDeadline) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"});
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

TEST(ArtifactHub, ChildrenInheritNoneOfItsSockets) {
  Hub hub;
  harness::ArtifactServer server(hub.root.string(), {"tokenizer.json"});
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
