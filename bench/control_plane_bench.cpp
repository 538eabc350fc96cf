// Control-plane throughput and latency: W writer streams push batches of 512 events through
// Connect into a live controller (history on disk, one Observe subscriber attached); reports the
// ingest rate and the Observe latency (emit time → subscriber read, same clock) at p50/p99.
// A second phase measures latency at a trickle (one event every ms), where batching cannot help.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#include "harness/control/controller.hpp"
#include "harness/proto/faultline.grpc.pb.h"

namespace pb = faultline::v1;
using namespace std::chrono;

static const std::string kBenchSecret = "bench-secret";

static int64_t now_ns() {
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
}

static void push(const std::string& addr, int rank, int batches, int per_batch, int pause_us) {
  auto stub =
      pb::Controller::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("faultline-secret", kBenchSecret);
  auto stream = stub->Connect(&ctx);
  uint64_t seq = 0;
  for (int b = 0; b < batches; ++b) {
    pb::EventBatch batch;
    for (int i = 0; i < per_batch; ++i) {
      auto* e = batch.add_events();
      e->set_rank(rank);
      e->set_seq(seq++);
      e->set_time_unix_ns(now_ns());
      e->set_kind("collective");
      e->set_step(b);
      e->set_data_json(
          R"({"op":"all_reduce","group":"dp","seq":12,"count":4096,"dtype":"fp32","peer":-1,"state":"completed"})");
    }
    stream->Write(batch);
    if (pause_us > 0) std::this_thread::sleep_for(microseconds(pause_us));
  }
  stream->WritesDone();
  stream->Finish();
}

static void phase(const char* name, int writers, int batches, int per_batch, int pause_us) {
  const auto dir = std::filesystem::temp_directory_path() / "faultline-control-bench";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  fl::harness::History history((dir / "history.jsonl").string());
  fl::harness::Controller ctl(
      history, [](const fl::harness::ControlAction&) { return fl::harness::ControlResult{}; },
      kBenchSecret);
  const std::string addr = ctl.start("127.0.0.1:0");
  const uint64_t total = static_cast<uint64_t>(writers) * batches * per_batch;
  std::vector<int64_t> lat;
  lat.reserve(total);
  std::atomic<bool> subscribed{false};
  std::atomic<size_t> seen{0};
  grpc::ClientContext ctx;
  ctx.AddMetadata("faultline-secret", kBenchSecret);
  std::thread sub([&] {
    auto stub =
        pb::Controller::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
    pb::ObserveRequest req;
    req.add_kinds("collective");
    auto reader = stub->Observe(&ctx, req);
    subscribed = true;
    pb::Event e;
    while (reader->Read(&e)) {
      lat.push_back(now_ns() - e.time_unix_ns());
      seen = lat.size();
    }
  });
  while (!subscribed) std::this_thread::sleep_for(milliseconds(1));
  std::this_thread::sleep_for(milliseconds(100));
  const auto t0 = steady_clock::now();
  std::vector<std::thread> ws;
  for (int w = 0; w < writers; ++w) ws.emplace_back(push, addr, w, batches, per_batch, pause_us);
  for (auto& t : ws) t.join();
  while (ctl.events_ingested() < total) std::this_thread::sleep_for(microseconds(100));
  const double secs = duration<double>(steady_clock::now() - t0).count();
  for (int i = 0; i < 200 && seen < total; ++i) std::this_thread::sleep_for(milliseconds(10));
  ctx.TryCancel();
  sub.join();
  ctl.shutdown();
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    return lat.empty() ? 0.0 : lat[static_cast<size_t>(p * (lat.size() - 1))] / 1e6;
  };
  std::printf(
      "%-8s %d writers x %d x %d events: ingest %.0f events/s; Observe saw %zu, latency "
      "p50 %.2f ms p99 %.2f ms max %.2f ms\n",
      name, writers, batches, per_batch, total / secs, lat.size(), pct(0.5), pct(0.99), pct(1.0));
  std::filesystem::remove_all(dir);
}

int main() {
  phase("burst", 8, 100, 512, 0);
  phase("trickle", 4, 2000, 1, 1000);
  return 0;
}
