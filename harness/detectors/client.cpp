#include "harness/detectors/client.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "base/control_auth.hpp"
#include "harness/proto/event_proto.hpp"
#include "harness/proto/faultline.grpc.pb.h"

namespace fl::detect {

namespace pb = faultline::v1;

Event view_of(const fl::Event& e) {
  Event v;
  v.rank = e.rank;
  v.source = e.source;
  v.kind = e.kind;
  v.step = e.step;
  v.t_ns = e.t_ns;
  v.data = nlohmann::json::parse(e.data_json, nullptr, false);
  if (v.data.is_discarded()) v.data = nlohmann::json::object();
  return v;
}

int stage_of(const std::string& symptom) {
  if (symptom.empty() || symptom[0] < '1' || symptom[0] > '5') return 0;
  return symptom[0] - '0';
}

void RunView::update(const Event& e) {
  if (e.source == "harness") {
    if (e.kind == "run_start") {
      world = e.data.value("ranks", 0);
    } else if (e.kind == "launch" && e.rank >= 0) {
      if (first_launch_ns < 0) first_launch_ns = e.t_ns;
      if (e.data.contains("argv") && e.data["argv"].is_array() && !e.data["argv"].empty()) {
        const std::string bin = e.data["argv"][0].get<std::string>();
        workload = bin.find("fl-infer") != std::string::npos ? "infer" : "train";
      }
      Rank& r = ranks[e.rank];
      r.exited = false;
      r.exit_class.clear();
      r.last_beat_ns = e.t_ns;
    } else if (e.kind == "rank_exit" && e.rank >= 0) {
      Rank& r = ranks[e.rank];
      r.exited = true;
      r.exit_class = e.data.value("class", "");
      r.exit_by_harness = e.data.value("by_harness", false);
    } else if (e.kind == "restart") {
      ++incarnation;
      for (auto& [id, r] : ranks) r = Rank{};
      world = e.data.value("ranks", world);
    } else if (e.kind == "run_ending") {
      ending = true;
    }
    return;
  }
  if (e.source != "rank" || e.rank < 0) return;
  Rank& r = ranks[e.rank];
  r.last_beat_ns = e.t_ns;
  if (e.kind == "hello") {
    r.hello = true;
    world = std::max(world, e.data.value("world_size", 0));
  } else if (e.kind == "layout") {
    r.layout = e.data;
  } else if (e.kind == "step") {
    if (e.step > r.last_step) {
      r.last_step = e.step;
      r.last_step_ns = e.t_ns;
    }
    if (r.first_step_ns < 0) r.first_step_ns = e.t_ns;
  } else if (e.kind == "exit") {
    r.exited = true;
    r.exit_class = e.data.value("exit_code", 1) == 0 ? "ok" : "error";
  }
}

bool RunView::any_alive() const {
  return std::any_of(ranks.begin(), ranks.end(), [](auto& kv) { return !kv.second.exited; });
}

int64_t RunView::max_step() const {
  int64_t m = -1;
  for (auto& [id, r] : ranks) m = std::max(m, r.last_step);
  return m;
}

std::vector<int> RunView::alive() const {
  std::vector<int> out;
  for (auto& [id, r] : ranks) {
    if (!r.exited && r.last_beat_ns >= 0) out.push_back(id);
  }
  return out;
}

struct Tool::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Controller::Stub> stub;
  std::string secret;  // presented on every call
  void sign(grpc::ClientContext& ctx) const {
    if (!secret.empty()) ctx.AddMetadata(kControlSecretHeader, secret);
  }
};

Tool::Tool(const std::string& default_name, const std::string& addr) : impl_(new Impl) {
  const char* n = std::getenv("FAULTLINE_TOOL_NAME");
  name_ = n && *n ? n : default_name;
  const char* a = std::getenv("FAULTLINE_CONTROL_ADDR");
  const std::string target = !addr.empty() ? addr : (a ? a : "");
  if (target.empty()) {
    throw std::runtime_error(
        "no control-plane address: set FAULTLINE_CONTROL_ADDR (the harness does when it starts "
        "the tool) or pass --control");
  }
  impl_->secret = control_secret_for(target);
  impl_->channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  impl_->stub = pb::Controller::NewStub(impl_->channel);
  last_event_at_ = std::chrono::steady_clock::now();
}

Tool::~Tool() = default;

namespace {

// How many harness nanoseconds pass per nanosecond here: 1 beside a live run, the replay's speed
// when `faultline score --offline` feeds a recorded history faster (FAULTLINE_CLOCK_RATE).
double clock_rate() {
  static const double rate = [] {
    const char* v = std::getenv("FAULTLINE_CLOCK_RATE");
    const double r = v ? std::atof(v) : 1.0;
    return r > 0 ? r : 1.0;
  }();
  return rate;
}

}  // namespace

int64_t Tool::now_ns() const {
  const auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - last_event_at_)
                         .count();
  return last_event_ns_ + static_cast<int64_t>(static_cast<double>(since) * clock_rate());
}

void Tool::run(const std::function<void(const Event&)>& on_event,
               const std::function<void(int64_t)>& on_tick, std::chrono::milliseconds tick) {
  grpc::ClientContext ctx;
  impl_->sign(ctx);
  pb::ObserveRequest req;
  req.set_from_start(true);
  auto reader = impl_->stub->Observe(&ctx, req);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<pb::Event> q;
  bool done = false;
  std::thread t([&] {
    pb::Event e;
    while (reader->Read(&e)) {
      std::lock_guard lock(mu);
      q.push_back(e);
      cv.notify_one();
    }
    std::lock_guard lock(mu);
    done = true;
    cv.notify_one();
  });
  // A faster clock ticks as often in harness time: every `tick` of it.
  tick = std::max(std::chrono::milliseconds(1),
                  std::chrono::milliseconds(static_cast<int64_t>(tick.count() / clock_rate())));
  auto last_tick = std::chrono::steady_clock::now();
  bool ending = false;
  while (!ending) {
    std::deque<pb::Event> batch;
    bool finished = false;
    {
      std::unique_lock lock(mu);
      cv.wait_for(lock, tick, [&] { return !q.empty() || done; });
      batch.swap(q);
      finished = done && batch.empty();
    }
    for (const auto& p : batch) {
      const Event e = view_of(from_proto(p));
      last_event_ns_ = std::max(last_event_ns_, e.t_ns);
      last_event_at_ = std::chrono::steady_clock::now();
      view_.update(e);
      on_event(e);
      if (e.kind == "run_ending") ending = true;
    }
    if (on_tick && std::chrono::steady_clock::now() - last_tick >= tick) {
      last_tick = std::chrono::steady_clock::now();
      on_tick(now_ns());
    }
    if (finished) break;
  }
  ctx.TryCancel();
  t.join();
  const grpc::Status st = reader->Finish();
  if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    throw std::runtime_error("the control plane refused this tool: " + st.error_message());
  }
}

bool Tool::report(const Finding& f) {
  std::vector<int> ranks = f.ranks;
  std::sort(ranks.begin(), ranks.end());
  const std::string key =
      !f.key.empty() ? f.key : fmt::format("{}|{}", f.symptom, fmt::join(ranks, ","));
  if (!posted_.insert(key).second) return false;
  pb::Diagnosis d;
  d.set_detector(name_);
  d.set_symptom(f.symptom.empty() ? "unknown" : f.symptom);
  d.set_stage(f.stage > 0 ? f.stage : stage_of(f.symptom));
  for (int r : ranks) d.add_ranks(r);
  d.set_step(f.step);
  d.set_confidence(f.confidence);
  d.set_evidence(f.evidence);
  pb::ReportAck ack;
  grpc::ClientContext ctx;
  impl_->sign(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const auto st = impl_->stub->Report(&ctx, d, &ack);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: report failed: %s\n", name_.c_str(), st.error_message().c_str());
    return false;
  }
  ++reports_;
  std::printf("%s: diagnosis %s ranks [%s] step %lld: %s\n", name_.c_str(), d.symptom().c_str(),
              fmt::format("{}", fmt::join(ranks, ",")).c_str(), static_cast<long long>(f.step),
              f.evidence.c_str());
  std::fflush(stdout);
  return true;
}

bool Tool::control(const std::string& action, int rank, const std::vector<std::string>& args,
                   int dp, std::string* reply, const std::string& checkpoint) {
  pb::ControlRequest r;
  r.set_action(action);
  r.set_rank(rank);
  r.set_requester(name_);
  for (auto& a : args) r.add_args(a);
  r.set_dp(dp);
  r.set_checkpoint(checkpoint);
  pb::ControlReply rep;
  grpc::ClientContext ctx;
  impl_->sign(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(15));
  const auto st = impl_->stub->Control(&ctx, r, &rep);
  if (reply) *reply = st.ok() ? rep.message() : st.error_message();
  return st.ok() && rep.ok();
}

}  // namespace fl::detect
