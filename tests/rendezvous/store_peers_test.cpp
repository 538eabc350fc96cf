// The rendezvous store against what a hostile or broken peer sends, over real loopback TCP: frames
// written by hand past the store's limits (message size, keys, bytes, connections, bytes buffered
// across connections), connections without the run's secret or with a wrong or slow one, and a
// seeded fuzz of random frames. The store answers or closes each and keeps serving the ranks.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <cstring>

#include "workloads/rendezvous/protocol.hpp"
#include "workloads/rendezvous/store_client.hpp"
#include "workloads/rendezvous/store_server.hpp"

namespace fl::rdzv {
namespace {

using std::chrono::milliseconds;

// A raw connection to the store, speaking the wire format by hand (what a hostile or broken peer
// sends: a header and nothing, or a header announcing more than the limit).
int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
}

std::string header(uint32_t n) {
  return std::string(reinterpret_cast<const char*>(&n), 4);
}

std::string auth_frame(const std::string& secret) {
  return Writer(static_cast<uint8_t>(Command::kAuth)).str(secret).finish();
}

// A raw connection that presented `secret` and read the store's ok (5 bytes: length 1, kOk).
int raw_login(uint16_t port, const std::string& secret = "") {
  const int fd = raw_connect(port);
  if (fd < 0) return -1;
  send_all(fd, auth_frame(secret));
  char ok[5];
  if (::recv(fd, ok, sizeof(ok), MSG_WAITALL) != 5 || static_cast<Status>(ok[4]) != Status::kOk) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// `n` raw connections that presented no secret, were let in and sent `bytes`; fewer when a
// login failed.
std::vector<int> logins_sending(uint16_t port, int n, const std::string& bytes) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = raw_login(port);
    if (fd < 0) break;
    send_all(fd, bytes);
    fds.push_back(fd);
  }
  return fds;
}

// Everything the server sends until it closes the connection (bounded by a receive timeout).
std::string read_until_closed(int fd) {
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// Waits until the server's usage satisfies `pred` (no timing asserted: 20 s is only a bound).
template <class Pred>
StoreUsage wait_usage(const StoreServer& s, Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  StoreUsage u = s.usage();
  while (!pred(u) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
    u = s.usage();
  }
  return u;
}

TEST(StoreLimits, AnOversizedHeaderIsRefusedWithAnErrorAndNothingIsAllocated) {
  StoreServer server("127.0.0.1", 0, StoreLimits{1 << 20, 1000, 1 << 20});
  server.start();
  // 24 connections each announcing 64 MiB (what once cost 678 MiB before any data came).
  const std::vector<int> fds = logins_sending(server.port(), 24, header(64u << 20));
  ASSERT_EQ(fds.size(), 24u);
  for (int fd : fds) {
    const std::string reply = read_until_closed(fd);  // ends: the server closed the connection
    ::close(fd);
    ASSERT_GE(reply.size(), 5u);
    uint32_t n;
    std::memcpy(&n, reply.data(), 4);
    ASSERT_EQ(reply.size(), 4u + n);
    EXPECT_EQ(static_cast<Status>(reply[4]), Status::kError);
    EXPECT_NE(reply.find("request of 67108864 bytes is above the store's limit of 1048576 bytes "
                         "(FAULTLINE_STORE_MAX_MESSAGE)"),
              std::string::npos)
        << reply.substr(5);
  }
  const StoreUsage u = server.usage();
  EXPECT_EQ(u.refused, 24);
  EXPECT_EQ(u.buffered_bytes, 0);
  EXPECT_EQ(u.keys, 0);
}

TEST(StoreLimits, ABodyIsBufferedAsItArrivesNotAsAnnounced) {
  StoreServer server("127.0.0.1", 0, StoreLimits{1 << 20, 1000, 1 << 20});
  server.start();
  // 24 connections announce the largest allowed request, then send 10 bytes of it.
  const std::vector<int> fds =
      logins_sending(server.port(), 24, header(1u << 20) + std::string(10, 'x'));
  ASSERT_EQ(fds.size(), 24u);
  const StoreUsage u =
      wait_usage(server, [](const StoreUsage& now) { return now.buffered_bytes >= 240; });
  EXPECT_EQ(u.buffered_bytes, 240) << "the server holds what arrived, not the announced 24 MiB";
  for (int fd : fds) ::close(fd);
  // Closed connections give their buffers back.
  EXPECT_EQ(wait_usage(server, [](const StoreUsage& now) { return now.buffered_bytes == 0; })
                .buffered_bytes,
            0);
  // The store still serves.
  StoreClient c("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000));
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
}

TEST(StoreLimits, KeyCountAndTotalBytesAreBounded) {
  StoreServer server("127.0.0.1", 0, StoreLimits{1 << 20, 3, 100});
  server.start();
  StoreClient c("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000));
  c.set("a", "1");
  c.set("b", "2");
  EXPECT_EQ(c.add("n", 7), 7);
  auto refused = [&](auto call, const char* setting) {
    try {
      call();
      ADD_FAILURE() << "not refused: " << setting;
    } catch (const StoreError& e) {
      EXPECT_EQ(e.kind(), StoreErrorKind::kServer) << e.what();
      EXPECT_NE(std::string(e.what()).find(setting), std::string::npos) << e.what();
    }
  };
  refused([&] { c.set("d", "4"); }, "the store holds 3 keys, its limit (FAULTLINE_STORE_MAX_KEYS)");
  refused([&] { c.compare_set("e", "", "5"); }, "FAULTLINE_STORE_MAX_KEYS");
  c.set("a", "one");  // replacing a value adds no key
  EXPECT_TRUE(c.remove("b"));
  c.set("d", "4");
  refused([&] { c.set("d", std::string(200, 'v')); }, "FAULTLINE_STORE_MAX_BYTES");
  refused([&] { c.set("a", std::string(98, 'v')); }, "above its limit of 100");
  EXPECT_EQ(c.get("a"), "one");  // a refused replacement keeps the old value
  const StoreUsage u = server.usage();
  EXPECT_EQ(u.keys, 3);
  EXPECT_EQ(u.stored_bytes, 4 + 2 + 2);  // a=one, n=7, d=4
  EXPECT_EQ(u.refused, 4);
  EXPECT_EQ(c.num_keys(), 3);
}

// ---- The run's secret (FAULTLINE_CONTROL_SECRET): every connection presents it first.

std::string add_frame(const std::string& key, int64_t delta) {
  return Writer(static_cast<uint8_t>(Command::kAdd)).str(key).i64(delta).finish();
}

// What a StoreClient presenting `secret` is told, or "" when it got in.
std::string client_error(uint16_t port, const std::string& secret, StoreErrorKind* kind) {
  try {
    StoreClient c("127.0.0.1", port, milliseconds(5000), milliseconds(5000), secret);
  } catch (const StoreError& e) {
    *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(StoreAuth, AnAddWithoutTheSecretIsClosedUnansweredAndChangesNoKey) {
  const std::string secret = "run-secret-0123456789abcdef";
  StoreServer server("127.0.0.1", 0, {}, secret);
  server.start();
  StoreClient rank("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000), secret);
  EXPECT_EQ(rank.add("rdzv/arrivals", 2), 2);
  // Another user's `add rdzv/arrivals +1`, sent as the first frame: no answer, no change.
  const int fd = raw_connect(server.port());
  ASSERT_GE(fd, 0);
  send_all(fd, add_frame("rdzv/arrivals", 1));
  EXPECT_EQ(read_until_closed(fd), "");
  ::close(fd);
  EXPECT_EQ(rank.add("rdzv/arrivals", 0), 2);
  // A client without a secret is told what it lacked.
  StoreErrorKind kind = StoreErrorKind::kServer;
  const std::string err = client_error(server.port(), "", &kind);
  EXPECT_EQ(kind, StoreErrorKind::kUnauthenticated) << err;
  EXPECT_NE(err.find(fmt::format("rendezvous store at 127.0.0.1:{}: the server closed the "
                                 "connection when this process presented no secret "
                                 "(FAULTLINE_CONTROL_SECRET is unset)",
                                 server.port())),
            std::string::npos)
      << err;
  EXPECT_EQ(rank.add("rdzv/arrivals", 0), 2);
  const StoreUsage u = server.usage();
  EXPECT_EQ(u.unauthenticated, 1 + 3);  // the raw add, and the client's three attempts
  EXPECT_EQ(u.connections, 1);
  EXPECT_EQ(u.keys, 1);
}

TEST(StoreAuth, AWrongSecretIsRefusedAndWhatFollowsItIsNeverRead) {
  const std::string secret = "run-secret-0123456789abcdef";
  StoreServer server("127.0.0.1", 0, {}, secret);
  server.start();
  // The wrong secret, and an add right behind it in the same packet.
  const int fd = raw_connect(server.port());
  ASSERT_GE(fd, 0);
  send_all(fd, auth_frame("run-secret-0123456789abcdeX") + add_frame("rdzv/arrivals", 1));
  EXPECT_EQ(read_until_closed(fd), "");
  ::close(fd);
  StoreErrorKind kind = StoreErrorKind::kServer;
  const std::string err = client_error(server.port(), "not-the-run-secret", &kind);
  EXPECT_EQ(kind, StoreErrorKind::kUnauthenticated) << err;
  EXPECT_NE(err.find("presented a secret that is not the store's; the store takes only the run's "
                     "secret (FAULTLINE_CONTROL_SECRET, which the harness gives every rank)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("not-the-run-secret"), std::string::npos) << "the secret is never printed";
  StoreClient rank("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000), secret);
  EXPECT_FALSE(rank.check({"rdzv/arrivals"}));
  EXPECT_EQ(server.usage().keys, 0);
}

TEST(StoreAuth, ASlowSecretIsClosedAtItsDeadlineUnanswered) {
  StoreLimits limits;
  limits.auth_timeout_ms = 200;
  StoreServer server("127.0.0.1", 0, limits, "s");
  server.start();
  const int fd = raw_connect(server.port());
  ASSERT_GE(fd, 0);
  send_all(fd, auth_frame("s").substr(0, 6));  // half a frame, then nothing
  EXPECT_EQ(read_until_closed(fd), "");        // closed by the server, not our 10 s limit
  ::close(fd);
  const StoreUsage u = wait_usage(server, [](const StoreUsage& n) { return n.pending == 0; });
  EXPECT_EQ(u.unauthenticated, 1);
  EXPECT_EQ(u.pending, 0);
  EXPECT_EQ(u.buffered_bytes, 0);
}

TEST(StoreAuth, FourHundredIdleConnectionsHoldNoMemoryAndARankStillGetsIn) {
  StoreLimits limits;
  limits.max_pending = 8;
  limits.auth_timeout_ms = 600000;  // only the pending limit closes them here
  StoreServer server("127.0.0.1", 0, limits, "s");
  server.start();
  // 200 connections that announce 1 MiB - 1 and send 64 KiB of it (the attack that once took
  // rank 0 from 34 MB to 462 MB): none is a secret, none is read past its length.
  std::vector<int> big, idle;
  for (int i = 0; i < 200; ++i) {
    big.push_back(raw_connect(server.port()));
    ASSERT_GE(big.back(), 0);
    const std::string bytes = header((1u << 20) - 1) + std::string(65536, 'x');
    ::send(big.back(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  StoreUsage u = wait_usage(
      server, [](const StoreUsage& n) { return n.unauthenticated == 200 && n.pending == 0; });
  EXPECT_EQ(u.unauthenticated, 200);
  EXPECT_EQ(u.buffered_bytes, 0);
  // 200 that send nothing: the newest 8 wait, the oldest are evicted unanswered.
  for (int i = 0; i < 200; ++i) {
    idle.push_back(raw_connect(server.port()));
    ASSERT_GE(idle.back(), 0);
  }
  u = wait_usage(server, [](const StoreUsage& n) { return n.unauthenticated >= 392; });
  EXPECT_EQ(u.unauthenticated, 392);
  EXPECT_EQ(u.pending, 8);
  EXPECT_EQ(u.buffered_bytes, 0);
  EXPECT_EQ(u.connections, 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(read_until_closed(idle[i]), "") << i;
  // A rank arriving now evicts one more and is served.
  StoreClient rank("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000), "s");
  EXPECT_EQ(rank.add("rdzv/arrivals", 1), 1);
  u = server.usage();
  EXPECT_EQ(u.connections, 1);
  EXPECT_EQ(u.pending, 7);
  EXPECT_EQ(u.unauthenticated, 393);
  for (int fd : idle) ::close(fd);
  for (int fd : big) ::close(fd);
}

TEST(StoreLimits, BufferedBytesAcrossConnectionsAreCapped) {
  StoreLimits limits{1 << 20, 1000, 1 << 20};
  limits.max_buffered = 256 << 10;
  StoreServer server("127.0.0.1", 0, limits, "s");
  server.start();
  // 8 ranks, one after another, each announce 1 MiB - 1 and send 64 KiB of it: 512 KiB in all,
  // twice the cap. The first four fit exactly; each later one is refused at its first piece.
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(raw_login(server.port(), "s"));
    ASSERT_GE(fds.back(), 0);
    send_all(fds.back(), header((1u << 20) - 1) + std::string(64 << 10, 'x'));
    const StoreUsage u = wait_usage(server, [i](const StoreUsage& n) {
      return n.refused + n.buffered_bytes / (64 << 10) == i + 1 &&
             n.buffered_bytes % (64 << 10) == 0;
    });
    EXPECT_LE(u.buffered_bytes, 256 << 10) << "after connection " << i;
  }
  const StoreUsage u = server.usage();
  EXPECT_EQ(u.buffered_bytes, 256 << 10);
  EXPECT_EQ(u.refused, 4);
  for (int i = 4; i < 8; ++i) {
    const std::string reply = read_until_closed(fds[i]);
    EXPECT_NE(reply.find("bytes across all connections, above its limit of 262144 "
                         "(FAULTLINE_STORE_MAX_BUFFERED); closing the connection"),
              std::string::npos)
        << i << ": " << reply;
  }
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(
      wait_usage(server, [](const StoreUsage& n) { return n.buffered_bytes == 0; }).buffered_bytes,
      0);
}

TEST(StoreLimits, ConnectionsPastTheCapAreToldSo) {
  StoreLimits limits;
  limits.max_connections = 2;
  StoreServer server("127.0.0.1", 0, limits, "s");
  server.start();
  StoreClient a("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000), "s");
  StoreClient b("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000), "s");
  StoreErrorKind kind = StoreErrorKind::kUnauthenticated;
  const std::string err = client_error(server.port(), "s", &kind);
  EXPECT_EQ(kind, StoreErrorKind::kServer) << err;
  EXPECT_NE(err.find("the store serves 2 connections, its limit (FAULTLINE_STORE_MAX_CONNECTIONS)"),
            std::string::npos)
      << err;
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 1), 2);
  EXPECT_EQ(wait_usage(server, [](const StoreUsage& n) { return n.connections == 2; }).connections,
            2);
}

// Seeded fuzz of what a peer can send: random frames, first with no secret, then after it. The
// store answers or closes each, never crashes or hangs, and gives back every byte it buffered.
TEST(StoreFuzz, RandomFramesWithAndWithoutTheSecretLeaveTheStoreServing) {
  StoreLimits limits{4096, 1000, 1 << 20};
  limits.auth_timeout_ms = 2000;
  StoreServer server("127.0.0.1", 0, limits, "s");
  server.start();
  uint64_t x = 0x9e3779b97f4a7c15ull;  // xorshift: the same inputs on every run
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  auto random_frame = [&] {
    std::string body(next() % 64, '\0');
    for (auto& c : body) c = static_cast<char>(next());
    // Often a real command; never a get or wait, which would park until their random timeout.
    static const char kCommands[] = {1, 4, 5, 6, 7, 8, 9};
    if (!body.empty() && next() % 2) body[0] = kCommands[next() % sizeof(kCommands)];
    if (!body.empty() && (body[0] == 2 || body[0] == 3)) body[0] = 8;
    const uint32_t n = next() % 8 == 0 ? static_cast<uint32_t>(next()) : body.size();
    return header(n) + body;
  };
  for (int i = 0; i < 300; ++i) {
    const bool authed = i % 2 == 1;
    const int fd = authed ? raw_login(server.port(), "s") : raw_connect(server.port());
    ASSERT_GE(fd, 0) << i;
    const std::string frame = random_frame();
    ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    const std::string reply = read_until_closed(fd);
    ::close(fd);
    if (!authed) {
      EXPECT_EQ(reply, "") << i << ": a peer without the secret was answered";
    }
  }
  const StoreUsage u = wait_usage(server, [](const StoreUsage& n) {
    return n.buffered_bytes == 0 && n.pending == 0 && n.connections == 0;
  });
  EXPECT_EQ(u.buffered_bytes, 0);
  EXPECT_EQ(u.pending, 0);
  EXPECT_EQ(u.connections, 0);
  EXPECT_EQ(u.unauthenticated, 150);
  StoreClient c("127.0.0.1", server.port(), milliseconds(5000), milliseconds(5000), "s");
  c.set("after", "fuzz");
  EXPECT_EQ(c.get("after"), "fuzz");
}

}  // namespace
}  // namespace fl::rdzv
