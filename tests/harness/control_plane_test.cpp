// The control plane belongs to its run: a per-run secret on every RPC (UNAUTHENTICATED and
// counted without it), a 0600 unix socket and secret file in a 0700 run directory, restart
// arguments checked against an allow-list, no listening socket of the harness inherited by a
// rank, and (as root) another user can neither reach the socket nor read the secret.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/control_auth.hpp"
#include "base/error.hpp"
#include "harness/control/controller.hpp"
#include "harness/launch/launch_args.hpp"
#include "harness/model/scenario.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "harness/run/runner.hpp"
#include "tests/support/children.hpp"
#include "tests/support/process.hpp"
#include "tests/support/scratch.hpp"

namespace fl::harness {
namespace {

namespace fs = std::filesystem;
namespace pb = faultline::v1;

std::string test_dir() {
  return test::fresh_test_dir("control",
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

int mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

std::unique_ptr<pb::Controller::Stub> stub_for(const std::string& addr) {
  return pb::Controller::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
}

// One Control call with `secret` ("" : none); returns the status and fills `reply`.
grpc::Status control(const std::string& addr, const std::string& secret, pb::ControlRequest req,
                     pb::ControlReply* reply) {
  grpc::ClientContext ctx;
  if (!secret.empty()) ctx.AddMetadata(kControlSecretHeader, secret);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  return stub_for(addr)->Control(&ctx, req, reply);
}

TEST(ControlAuth, SecretsAreRandomHexComparedExactlyAndFiledPrivately) {
  const std::string a = make_control_secret(), b = make_control_secret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
  EXPECT_TRUE(secrets_equal(a, a));
  EXPECT_FALSE(secrets_equal(a, b));
  EXPECT_FALSE(secrets_equal(a, a.substr(0, 63)));
  EXPECT_FALSE(secrets_equal(a, ""));
  const auto dir = test_dir();
  ::umask(0);  // the file is 0600 whatever the umask
  write_secret_file(dir + "/control.secret", a);
  ::umask(022);
  EXPECT_EQ(mode_of(dir + "/control.secret"), 0600);
  EXPECT_THROW(write_secret_file(dir + "/control.secret", b), Error);  // never overwritten
  // A client finds it beside a unix socket address, and the environment wins.
  ::unsetenv(kControlSecretEnv);
  EXPECT_EQ(control_secret_for("unix:" + dir + "/control.sock"), a);
  EXPECT_EQ(control_secret_for("127.0.0.1:1"), "");
  ::setenv(kControlSecretEnv, "from-env", 1);
  EXPECT_EQ(control_secret_for("unix:" + dir + "/control.sock"), "from-env");
  ::unsetenv(kControlSecretEnv);
  fs::remove_all(dir);
}

TEST(ControlAuth, EveryRpcWithoutTheRightSecretIsUnauthenticatedAndCounted) {
  const auto dir = test_dir();
  History h(dir + "/history.jsonl");
  std::atomic<int> actions{0};
  Controller c(
      h,
      [&](const ControlAction&) {
        ++actions;
        return ControlResult{true, "done", {}};
      },
      "right-secret");
  const std::string addr = c.start("unix:" + dir + "/control.sock");
  EXPECT_EQ(mode_of(dir + "/control.sock"), 0600);
  h.harness("run_start", {{"ranks", 1}});
  for (const std::string secret : {"", "wrong-secret", "right-secre", "right-secret0"}) {
    pb::ControlRequest req;
    req.set_action("abort");
    pb::ControlReply reply;
    EXPECT_EQ(control(addr, secret, req, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "[" << secret << "]";
    grpc::ClientContext rctx;
    if (!secret.empty()) rctx.AddMetadata(kControlSecretHeader, secret);
    pb::Diagnosis d;
    d.set_detector("intruder");
    pb::ReportAck ack;
    EXPECT_EQ(stub_for(addr)->Report(&rctx, d, &ack).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext octx;
    if (!secret.empty()) octx.AddMetadata(kControlSecretHeader, secret);
    pb::ObserveRequest oreq;
    oreq.set_from_start(true);
    oreq.set_include_ground_truth(true);
    auto reader = stub_for(addr)->Observe(&octx, oreq);
    pb::Event e;
    EXPECT_FALSE(reader->Read(&e)) << "an unauthenticated observer read " << e.kind();
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext cctx;
    if (!secret.empty()) cctx.AddMetadata(kControlSecretHeader, secret);
    auto stream = stub_for(addr)->Connect(&cctx);
    pb::EventBatch batch;
    auto* ev = batch.add_events();
    ev->set_rank(0);
    ev->set_kind("step");
    stream->Write(batch);
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(actions.load(), 0);
  EXPECT_EQ(c.rejected(), 16u);
  EXPECT_EQ(c.events_ingested(), 0u);
  for (const auto& e : h.events()) {
    EXPECT_NE(e.kind, "diagnosis");
    EXPECT_NE(e.source, "rank");
  }
  // The right secret is served.
  pb::ControlRequest req;
  req.set_action("abort");
  pb::ControlReply reply;
  EXPECT_TRUE(control(addr, "right-secret", req, &reply).ok());
  EXPECT_TRUE(reply.ok());
  EXPECT_EQ(actions.load(), 1);
  EXPECT_EQ(c.rejected(), 16u);
  c.shutdown();
  fs::remove_all(dir);
}

TEST(ControlAuth, RestartArgumentsAreTheWorkersOwnAndStayInTheRunDirectory) {
  const auto dir = test_dir();
  fs::create_directories(dir + "/ranks/rank0");
  fs::create_symlink("/etc", dir + "/etc-link");
  using V = std::vector<std::string>;
  for (const V& ok : {V{}, V{"--micro-batch", "2", "--grad-accum", "4"}, V{"--reset-loss-scale"},
                      V{"--skip-batches", "12"}, V{"--lr", "1e-3"}, V{"--precision", "bf16"},
                      V{"--metrics", dir + "/ranks/rank0/m.jsonl"}, V{"--metrics", "m.jsonl"},
                      V{"--resume", dir + "/checkpoints/step_4"}}) {
    EXPECT_EQ(check_restart_args(ok, dir), "") << fmt::format("{}", fmt::join(ok, " "));
  }
  const std::vector<std::pair<V, std::string>> refused = {
      {{"--plugin", "p'$(id>x)'q", "--plugin-jit"}, "'--plugin' is not allowed"},
      {{"--plugin-jit"}, "'--plugin-jit' is not allowed"},
      {{"--fetch", "tokenizer.json"}, "'--fetch' is not allowed"},
      {{"--device", "cuda"}, "'--device' is not allowed"},
      {{"--metrics", "/etc/shadow"}, "--metrics '/etc/shadow' is outside the run directory"},
      {{"--metrics", "../../../../etc/x"}, "is outside the run directory"},
      {{"--save-dir", dir + "/../elsewhere"}, "is outside the run directory"},
      {{"--resume", dir + "/etc-link/passwd"}, "is outside the run directory"},
      {{"--lr", "1;id"}, "--lr '1;id' is not a number"},
      {{"--schedule", "$(id)"}, "is not a plain word"},
      {{"--micro-batch"}, "'--micro-batch' needs a value"},
      {{"2"}, "argument '2' is not allowed"},
  };
  for (const auto& [args, want] : refused) {
    const std::string err = check_restart_args(args, dir);
    EXPECT_NE(err.find(want), std::string::npos)
        << fmt::format("{}", fmt::join(args, " ")) << ": " << err;
  }
  fs::remove_all(dir);
}

// Inodes of the listening sockets of this network namespace (TCP and unix).
std::set<std::string> listening_inodes() {
  std::set<std::string> out;
  for (const char* f : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(f);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream w(line);
      std::vector<std::string> col;
      for (std::string x; w >> x;) col.push_back(x);
      if (col.size() > 9 && col[3] == "0A") out.insert(col[9]);
    }
  }
  std::ifstream un("/proc/net/unix");
  std::string line;
  std::getline(un, line);
  while (std::getline(un, line)) {
    std::istringstream w(line);
    std::vector<std::string> col;
    for (std::string x; w >> x;) col.push_back(x);
    if (col.size() > 6 && col[3] == "00010000") out.insert(col[6]);
  }
  return out;
}

// The socket inodes a process holds open.
std::set<std::string> socket_inodes(const std::string& pid) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + pid + "/fd", ec)) {
    const std::string t = fs::read_symlink(e.path(), ec).string();
    if (t.rfind("socket:[", 0) == 0) out.insert(t.substr(8, t.size() - 9));
  }
  return out;
}

// Collects what a check found wrong, one line each: a client thread of the run cannot assert.
using Fail = std::function<void(const std::string&)>;

// The run directory is 0700, the secret file and the socket 0600, and the address is the socket.
void check_private_files(const std::string& addr, const std::string& dir, const Fail& fail) {
  if (mode_of(dir) != 0700) fail(fmt::format("run dir mode {:o}", mode_of(dir)));
  if (mode_of(dir + "/control.secret") != 0600) fail("secret file not 0600");
  if (addr != "unix:" + dir + "/control.sock") fail("address " + addr);
  if (mode_of(dir + "/control.sock") != 0600) fail("socket not 0600");
}

// Rank 0's pid, from its hello, once it trains (step 2); "" when it does not within 2 minutes.
std::string training_rank0_pid(const std::string& dir) {
  std::string pid;
  for (int i = 0; i < 4800 && pid.empty(); ++i) {  // up to 2 min: a loaded host
    std::string hello;
    bool training = false;
    for (const auto& e : read_history(dir + "/history.jsonl")) {
      if (e.source != "rank" || e.rank != 0) continue;
      if (e.kind == "hello") hello = e.data_json;
      training = training || (e.kind == "step" && e.step >= 2);
    }
    if (training && !hello.empty()) {
      pid = std::to_string(nlohmann::json::parse(hello).value("pid", 0));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  return pid;
}

// The process `pid` holds none of the harness's (this process's) listening sockets.
void check_no_listening_socket_inherited(const std::string& pid, const Fail& fail) {
  std::set<std::string> ours;  // the harness's listening sockets
  const auto listening = listening_inodes();
  for (const auto& i : socket_inodes("self")) {
    if (listening.count(i)) ours.insert(i);
  }
  if (ours.size() < 2) fail(fmt::format("{} listening sockets in the harness", ours.size()));
  for (const auto& i : socket_inodes(pid)) {
    if (ours.count(i)) fail("rank 0 inherited the harness's listening socket " + i);
  }
}

// Control answers only with the secret, and refuses restart arguments off its allow-list.
void check_control_calls(const std::string& addr, const std::string& secret, const Fail& fail) {
  pb::ControlRequest req;
  pb::ControlReply reply;
  req.set_action("list_faults");
  if (control(addr, "", req, &reply).error_code() != grpc::StatusCode::UNAUTHENTICATED)
    fail("no secret was not UNAUTHENTICATED");
  if (!control(addr, secret, req, &reply).ok() || !reply.ok()) fail("the secret was refused");
  req.set_action("restart_job");
  req.add_args("--plugin");
  req.add_args("p'$(id>x)'q");
  req.add_args("--plugin-jit");
  if (!control(addr, secret, req, &reply).ok() || reply.ok() ||
      reply.message().find("'--plugin' is not allowed") == std::string::npos)
    fail("restart_job --plugin: " + reply.message());
}

// Another local user (as root only): the socket and the secret are out of its reach.
void check_other_user_kept_out(const std::string& dir, const Fail& fail) {
  // Built before the fork: the child makes system calls only.
  const std::string sock = dir + "/control.sock", secret_file = dir + "/control.secret";
  const int rc = test::as_nobody([&] {
    if (::open(secret_file.c_str(), O_RDONLY) >= 0) return 1;
    if (errno != EACCES) return 2;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock.c_str());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return 3;
    return errno == EACCES ? 0 : 4;
  });
  if (rc != 0) fail(fmt::format("uid 65534 reached the run (check {})", rc));
}

TEST(ControlPlaneRun, TheRunsControlPlaneAnswersOnlyItsOwnRanksAndTools) {
  // Short: the socket path must fit a unix socket's 107 bytes.
  const auto results = test::fresh_test_dir("cp", "run");
  auto s = load_scenario(FAULTLINE_SOURCE_DIR "/scenarios/clean/clean-jit-fetch.yaml",
                         {false, {"workload.steps=400"}});
  RunOptions o;
  o.results_dir = results;
  o.print_summary = false;
  std::thread client;
  std::string addr_seen, secret, failures;
  auto fail = [&](const std::string& why) { failures += why + "\n"; };
  o.on_ready = [&](const std::string& addr, const std::string& dir) {
    addr_seen = addr;
    client = std::thread([&, addr, dir] {
      check_private_files(addr, dir, fail);
      std::ifstream(dir + "/control.secret") >> secret;
      // A rank's pid, from its hello, and its sockets once it trains.
      const std::string pid = training_rank0_pid(dir);
      if (pid.empty()) return fail("rank 0 never reached step 2");
      check_no_listening_socket_inherited(pid, fail);
      check_control_calls(addr, secret, fail);
      if (::geteuid() == 0) check_other_user_kept_out(dir, fail);
      pb::ControlRequest req;
      pb::ControlReply reply;
      req.set_action("abort");
      control(addr, secret, req, &reply);
    });
  };
  const auto r = run_scenario(s, o);
  client.join();
  EXPECT_EQ(failures, "");
  EXPECT_TRUE(r.harness_error.empty()) << r.harness_error;
  bool rejected = false, streamed = false, refused_restart = false;
  for (const auto& e : read_history(r.run_dir + "/history.jsonl")) {
    const auto d = nlohmann::json::parse(e.data_json);
    if (e.kind == "control_rejected") rejected = d.value("calls", 0) >= 1;
    if (e.kind == "telemetry" && e.rank == 0) streamed = d.value("streamed", 0) > 0;
    if (e.kind == "control" && d.value("action", "") == "restart_job")
      refused_restart = !d.value("ok", true);
  }
  EXPECT_TRUE(rejected) << "the unauthenticated call was not counted in the history";
  EXPECT_TRUE(streamed) << "rank 0's telemetry did not reach the control plane with the secret";
  EXPECT_TRUE(refused_restart);
  fs::remove_all(results);
}

// TCP (multi-host) still needs the secret: another user that knows the port gets
// UNAUTHENTICATED from `faultline control`, and cannot read the secret file.
TEST(ControlPlaneRun, OverTcpAnotherUserWithoutTheSecretIsUnauthenticated) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become uid 65534";
  const auto dir = test_dir();
  ::chmod(dir.c_str(), 0700);
  History h(dir + "/history.jsonl");
  const std::string secret = make_control_secret();
  write_secret_file(dir + "/control.secret", secret);
  std::atomic<int> actions{0};
  Controller c(
      h,
      [&](const ControlAction&) {
        ++actions;
        return ControlResult{true, "", {}};
      },
      secret);
  const std::string addr = c.start("127.0.0.1:0");
  const std::string out =
      test::removed_at_exit("/tmp/faultline-control-nobody-" + std::to_string(::getpid())).string();
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  const std::string secret_file = dir + "/control.secret";
  const int rc = test::as_nobody([&] {
    if (::open(secret_file.c_str(), O_RDONLY) >= 0) return 50;
    if (::access(FAULTLINE_CLI, X_OK) != 0) return 52;  // a checkout under a private directory
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::unsetenv(kControlSecretEnv);
    ::execl(FAULTLINE_CLI, FAULTLINE_CLI, "control", addr.c_str(), "abort", nullptr);
    return 51;
  });
  ::close(fd);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  ::unlink(out.c_str());
  if (rc == 52) {
    c.shutdown();
    fs::remove_all(dir);
    GTEST_SKIP() << "uid 65534 cannot run " << FAULTLINE_CLI
                 << " (a directory above it is private, e.g. a mktemp -d checkout)";
  }
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("needs the run's secret"), std::string::npos) << text;
  EXPECT_EQ(actions.load(), 0);
  EXPECT_EQ(c.rejected(), 1u);
  // The same command with the secret file, as the run's own user, acts.
  auto ok = test::run_process(
      {FAULTLINE_CLI, "control", addr, "list_faults", "--secret-file", dir + "/control.secret"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(actions.load(), 1);
  c.shutdown();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fl::harness
