// The rendezvous store over real loopback TCP: every call, concurrent clients, deadlines, and the
// socket outcomes a misconfigured launch produces (address in use, refused, connect timeout).
// What a hostile or broken peer sends (limits, the run's secret, fuzz) is store_peers_test.cpp's.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>

#include <cstring>

#include "workloads/rendezvous/protocol.hpp"
#include "workloads/rendezvous/store_client.hpp"
#include "workloads/rendezvous/store_server.hpp"

namespace fl::rdzv {
namespace {

using std::chrono::milliseconds;

class Store : public testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<StoreServer>("127.0.0.1", 0);
    server_->start();
    port_ = server_->port();
  }
  std::unique_ptr<StoreClient> client(milliseconds timeout = milliseconds(5000)) {
    return std::make_unique<StoreClient>("127.0.0.1", port_, timeout, milliseconds(5000));
  }
  std::unique_ptr<StoreServer> server_;
  uint16_t port_ = 0;
};

TEST_F(Store, SetGetAddCompareSetCheckDelete) {
  auto c = client();
  c->set("a", "1");
  EXPECT_EQ(c->get("a"), "1");
  c->set("a", std::string("bin\0ary", 7));
  EXPECT_EQ(c->get("a"), std::string("bin\0ary", 7));
  EXPECT_EQ(c->add("n", 5), 5);
  EXPECT_EQ(c->add("n", -2), 3);
  EXPECT_EQ(c->compare_set("cas", "", "first"), "first");   // missing key, expected "" -> set
  EXPECT_EQ(c->compare_set("cas", "wrong", "x"), "first");  // mismatch -> unchanged
  EXPECT_EQ(c->compare_set("cas", "first", "second"), "second");
  EXPECT_TRUE(c->check({"a", "n", "cas"}));
  EXPECT_FALSE(c->check({"a", "nope"}));
  EXPECT_EQ(c->num_keys(), 3);
  EXPECT_TRUE(c->remove("a"));
  EXPECT_FALSE(c->remove("a"));
  EXPECT_EQ(c->num_keys(), 2);
}

TEST_F(Store, AddOnANonIntegerIsAServerError) {
  auto c = client();
  c->set("s", "text");
  try {
    c->add("s", 1);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreErrorKind::kServer);
    EXPECT_NE(std::string(e.what()).find("add on key 's': its value is not an integer"),
              std::string::npos);
  }
  // The connection survives a server-side error.
  EXPECT_EQ(c->get("s"), "text");
}

TEST_F(Store, GetWaitsForALaterSet) {
  auto waiter = client();
  // t0 before the setter starts: the set comes at least 200 ms after it, whatever the load (taken
  // after the thread's start, a preempted main thread could read it late).
  const auto t0 = std::chrono::steady_clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    client()->set("late", "here");
  });
  EXPECT_EQ(waiter->get("late", milliseconds(5000)), "here");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(200));
  setter.join();
}

TEST_F(Store, GetAndWaitTimeOutNamingTheMissingKeys) {
  auto c = client();
  c->set("present", "1");
  try {
    c->get("never", milliseconds(300));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreErrorKind::kKeyTimeout);
    EXPECT_NE(std::string(e.what()).find("get('never')"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not appear within 300 ms"), std::string::npos);
  }
  try {
    c->wait({"present", "x", "y"}, milliseconds(300));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreErrorKind::kKeyTimeout);
    EXPECT_NE(std::string(e.what()).find("2 of 3 keys still missing after 300 ms: 'x', 'y'"),
              std::string::npos)
        << e.what();
  }
  // Still usable after timeouts.
  c->wait({"present"}, milliseconds(300));
}

TEST_F(Store, ConcurrentClientsCountExactly) {
  constexpr int kThreads = 16;
  constexpr int kAdds = 200;
  std::vector<std::thread> threads;
  std::vector<std::set<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = client();
      for (int i = 0; i < kAdds; ++i) seen[t].insert(c->add("counter", 1));
      c->set("done/" + std::to_string(t), "1");
    });
  }
  std::vector<std::string> keys;
  for (int t = 0; t < kThreads; ++t) keys.push_back("done/" + std::to_string(t));
  client()->wait(keys, milliseconds(20000));
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (auto& s : seen) all.insert(s.begin(), s.end());
  // Every add returned a distinct value: no lost or duplicated increments.
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(client()->add("counter", 0), kThreads * kAdds);
}

TEST_F(Store, ServerStopIsSeenAsConnectionLost) {
  auto c = client();
  c->set("k", "v");
  server_->stop();
  try {
    c->get("k", milliseconds(1000));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreErrorKind::kConnectionLost) << e.what();
  }
}

TEST(StoreSockets, AddressInUse) {
  StoreServer first("127.0.0.1", 0);
  try {
    StoreServer second("127.0.0.1", first.port());
    FAIL() << "second bind succeeded";
  } catch (const BindError& e) {
    EXPECT_NE(
        std::string(e.what()).find(fmt::format(
            "cannot listen on 127.0.0.1:{}: address already in use (EADDRINUSE)", first.port())),
        std::string::npos)
        << e.what();
  }
}

// A launcher's socket (torchrun's agent store): the launcher binds and listens, rank 0 serves on
// it, and while it is held nobody else can bind the port.
TEST(StoreSockets, ServesOnALaunchersListeningSocketAndRefusesAnyOther) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const uint16_t port = ntohs(a.sin_port);
  // Bound but not listening: not a store socket.
  const int copy = ::dup(fd);
  EXPECT_THROW(StoreServer::adopt(copy, "127.0.0.1"), BindError);
  ASSERT_EQ(::listen(fd, 16), 0);
  auto server = StoreServer::adopt(fd, "127.0.0.1");
  server->start();
  EXPECT_EQ(server->port(), port);
  StoreClient c("127.0.0.1", port);
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
  EXPECT_THROW(StoreServer("127.0.0.1", port), BindError);
  EXPECT_THROW(StoreServer::adopt(::open("/dev/null", O_RDONLY), "127.0.0.1"), BindError);
}

TEST(StoreSockets, RefusedAfterRetryingUntilTheDeadline) {
  uint16_t port;
  {
    StoreServer s("127.0.0.1", 0);  // learn a port, then free it
    port = s.port();
  }
  auto t0 = std::chrono::steady_clock::now();
  try {
    StoreClient c("127.0.0.1", port, milliseconds(1000), milliseconds(600));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreErrorKind::kRefused);
    EXPECT_NE(std::string(e.what()).find("connection refused (ECONNREFUSED) on every attempt"),
              std::string::npos)
        << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(300));  // it did retry
}

TEST(StoreSockets, LateServerIsReachedByARetryingClient) {
  uint16_t port;
  {
    StoreServer s("127.0.0.1", 0);
    port = s.port();
  }
  std::unique_ptr<StoreServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    late = std::make_unique<StoreServer>("127.0.0.1", port);
    late->start();
  });
  StoreClient c("127.0.0.1", port, milliseconds(2000), milliseconds(5000));
  starter.join();
  c.set("x", "y");
  EXPECT_EQ(c.get("x"), "y");
}

TEST(StoreSockets, ConnectTimeoutWhenNobodyAnswers) {
  // A listener whose accept queue is full and never drained: the kernel drops further SYNs, so
  // the connect neither succeeds nor is refused — as behind a firewall that drops packets.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(s, 0), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int f = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(f, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    fillers.push_back(f);
  }
  std::this_thread::sleep_for(milliseconds(100));
  try {
    StoreClient c("127.0.0.1", ntohs(a.sin_port), milliseconds(1000), milliseconds(800));
    // Some kernels complete the handshake from the SYN queue anyway; then the first call, which
    // nobody answers, must time out instead.
    c.set("k", "v");
    FAIL() << "a store that never answers was reached";
  } catch (const StoreError& e) {
    EXPECT_TRUE(e.kind() == StoreErrorKind::kConnectTimeout ||
                e.kind() == StoreErrorKind::kCallTimeout)
        << e.what();
    EXPECT_TRUE(std::string(e.what()).find("timed out") != std::string::npos ||
                std::string(e.what()).find("no answer") != std::string::npos)
        << e.what();
  }
  for (int f : fillers) close(f);
  close(s);
}

}  // namespace
}  // namespace fl::rdzv
