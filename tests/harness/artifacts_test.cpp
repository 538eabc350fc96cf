// Artifact fetches against the harness's hub: one download per node cache (concurrent ranks
// included), and each way a fetch fails says so with the URL.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

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
  harness::ArtifactServer server(hub.root.string());
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
  harness::ArtifactServer server(hub.root.string());
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
