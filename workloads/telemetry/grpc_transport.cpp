// The gRPC transport of worker telemetry: one Connect stream per rank. Batches go up; fault
// commands come down on the same stream and are handed to the command handler from a reader
// thread, so training never waits on the harness.
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/control_auth.hpp"
#include "harness/proto/event_proto.hpp"
#include "harness/proto/faultline.grpc.pb.h"
#include "workloads/telemetry/telemetry.hpp"

namespace fl::telemetry {

namespace {

class GrpcTransport final : public Transport {
 public:
  GrpcTransport(std::shared_ptr<grpc::Channel> channel, CommandHandler on_command,
                const std::string& secret)
      : stub_(faultline::v1::Controller::NewStub(channel)), on_command_(std::move(on_command)) {
    if (!secret.empty()) ctx_.AddMetadata(kControlSecretHeader, secret);
    stream_ = stub_->Connect(&ctx_);
    reader_ = std::thread([this] {
      faultline::v1::WorkerCommand cmd;
      while (stream_->Read(&cmd)) {
        if (on_command_) on_command_(cmd.action(), cmd.plan(), cmd.seed());
      }
      std::lock_guard lock(mu_);
      reader_done_ = true;
      cv_.notify_all();
    });
  }

  ~GrpcTransport() override { close(); }

  bool send(const std::vector<Event>& batch, uint64_t dropped_total) override {
    if (broken_) return false;
    faultline::v1::EventBatch msg;
    msg.set_dropped_total(dropped_total);
    for (const Event& e : batch) to_proto(e, msg.add_events());
    if (!stream_->Write(msg)) broken_ = true;
    return !broken_;
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    if (!broken_) stream_->WritesDone();
    // The harness ends the stream once it has read everything (it sees WritesDone); a harness
    // that is gone makes Read fail. Only a harness that hangs gets cancelled.
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(3), [&] { return reader_done_; })) {
        ctx_.TryCancel();
      }
    }
    if (reader_.joinable()) reader_.join();
    stream_->Finish();
  }

 private:
  std::unique_ptr<faultline::v1::Controller::Stub> stub_;
  CommandHandler on_command_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<faultline::v1::EventBatch, faultline::v1::WorkerCommand>>
      stream_;
  std::thread reader_;
  bool broken_ = false;
  bool closed_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool reader_done_ = false;
};

}  // namespace

std::unique_ptr<Transport> connect_transport(const std::string& addr, int /*rank*/,
                                             CommandHandler on_command, std::string* why) {
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
    *why = "no control plane answered within 5 s";
    return nullptr;
  }
  // The run's secret (FAULTLINE_CONTROL_SECRET, set by the harness): without it the harness
  // ends the stream at once and the events stay in the local file only.
  return std::make_unique<GrpcTransport>(std::move(channel), std::move(on_command),
                                         control_secret_for(addr));
}

}  // namespace fl::telemetry
