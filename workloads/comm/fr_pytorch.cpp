// The flight recorder in PyTorch's Flight Recorder schema (what c10d's FlightRecorder dumps and
// torch.distributed.flight_recorder.fr_trace reads), and the dump on demand (SIGUSR2).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "workloads/comm/flight_recorder.hpp"
#include "workloads/comm/pickle.hpp"

namespace fl::comm {

namespace {

// The schema version of c10d's dumps whose keys these are (FlightRecorder.hpp, version_val).
constexpr const char* kPytorchTraceVersion = "2.10";

// c10::ScalarType names, as c10d writes input_dtypes / output_dtypes.
const char* scalar_type_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "Float";
    case DType::kF16:
      return "Half";
    case DType::kBF16:
      return "BFloat16";
    case DType::kI32:
      return "Int";
    case DType::kI64:
      return "Long";
    case DType::kU8:
      return "Byte";
    case DType::kF64:
      return "Double";
  }
  return "Undefined";
}

// c10d's profiling names. Flat-buffer gather / reduce-scatter are c10d's *_base ops (one tensor
// of group size x count); split is the (color, key) exchange a split does on the parent group.
std::string profiling_name(const FlightEntry& e) {
  switch (e.op) {
    case OpKind::kAllReduce:
      return "nccl:all_reduce";
    case OpKind::kReduceScatter:
      return "nccl:_reduce_scatter_base";
    case OpKind::kAllGather:
      return "nccl:_all_gather_base";
    case OpKind::kBroadcast:
      return "nccl:broadcast";
    case OpKind::kBarrier:
      return "nccl:barrier";
    case OpKind::kSplit:
      return "nccl:split";
    case OpKind::kAllToAll:  // all_to_all_single
      return "nccl:all_to_all";
    case OpKind::kSend:  // group ranks, as c10d writes them: "send <me>-><peer>"
      return fmt::format("nccl:send {}->{}", e.group_rank, e.peer);
    case OpKind::kRecv:  // "recv <me><-<peer>"
      return fmt::format("nccl:recv {}<-{}", e.group_rank, e.peer);
  }
  return "nccl:unknown";
}

nlohmann::json entry_json(const FlightEntry& e, const std::map<int, ProcessGroupInfo>& groups) {
  const auto g = groups.find(e.pg_id);
  const std::string name = g != groups.end() ? g->second.name : e.group;
  const std::string desc = g != groups.end() ? g->second.desc : e.group;
  const auto n = static_cast<int64_t>(e.count);
  const int64_t size = std::max(e.group_size, 1);
  int64_t in = n, out = n;
  switch (e.op) {
    case OpKind::kReduceScatter:
      out = n / size;
      break;
    case OpKind::kAllGather:
    case OpKind::kSplit:
      out = n * size;
      break;
    default:  // in place, and send / recv (c10d records the one tensor as input and output)
      break;
  }
  const char* dt = scalar_type_name(e.dtype);
  // One tensor each way (a barrier's is empty), as the analyzer indexes input_sizes[0].
  auto sizes = [](int64_t c) { return nlohmann::json::array({nlohmann::json::array({c})}); };
  auto dtypes = [dt](int64_t) { return nlohmann::json::array({dt}); };
  const bool started = e.t_started_us > 0;
  const bool completed = e.state == OpState::kCompleted;
  // c10d knows scheduled / started / completed; a timed-out or failed op is retired without
  // completing (its last state stays), an op never started stays scheduled.
  std::string state = completed ? "completed" : started ? "started" : "scheduled";
  const bool retired = e.state != OpState::kScheduled && e.state != OpState::kStarted;
  nlohmann::json j;
  j["record_id"] = e.id;
  j["pg_id"] = e.pg_id;
  j["process_group"] = nlohmann::json::array({name, desc});
  j["collective_seq_id"] = e.collective_seq_id;
  j["p2p_seq_id"] = e.p2p_seq_id;
  j["op_id"] = e.op_id;
  j["profiling_name"] = profiling_name(e);
  j["time_created_ns"] = e.t_scheduled_us * 1000;
  j["input_sizes"] = sizes(in);
  j["input_dtypes"] = dtypes(in);
  j["output_sizes"] = sizes(out);
  j["output_dtypes"] = dtypes(out);
  j["state"] = state;
  j["time_discovered_started_ns"] =
      started ? nlohmann::json(e.t_started_us * 1000) : nlohmann::json(nullptr);
  j["time_discovered_completed_ns"] =
      completed ? nlohmann::json(e.t_completed_us * 1000) : nlohmann::json(nullptr);
  j["duration_ms"] =
      completed && started
          ? nlohmann::json(static_cast<double>(e.t_completed_us - e.t_started_us) / 1000.0)
          : nlohmann::json(nullptr);
  j["retired"] = retired;
  j["timeout_ms"] = e.timeout_ms;
  j["is_p2p"] = e.op == OpKind::kSend || e.op == OpKind::kRecv;
  j["frames"] = nlohmann::json::array();  // no Python stack in a C++ worker
  j["thread_id"] = std::to_string(e.thread_id);
  j["thread_name"] = "";
  return j;
}

std::string ranks_string(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

// Writes `bytes` to dir/name through a temp file and a rename (readers never see half a dump).
std::string write_atomic(const std::filesystem::path& dir, const std::string& name,
                         const std::string& bytes) {
  const auto path = dir / name;
  // The temp name holds no dump name: fr_trace would try to load a leftover one.
  const auto tmp = dir / fmt::format(".fr_dump.{}.{}.tmp", ::getpid(), ::gettid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return "cannot write " + tmp.string();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return ec ? "cannot rename " + tmp.string() + ": " + ec.message() : "";
}

}  // namespace

nlohmann::json FlightRecorder::pytorch_trace() const {
  std::map<int, ProcessGroupInfo> groups;
  for (auto& g : this->groups()) groups[g.id] = g;
  nlohmann::json j;
  j["version"] = kPytorchTraceVersion;
  nlohmann::json config = nlohmann::json::object(), status = nlohmann::json::object();
  for (const auto& [id, g] : groups) {
    config[g.name] = {{"name", g.name}, {"desc", g.desc}, {"ranks", ranks_string(g.ranks)}};
    status[std::to_string(id)] = {{"last_enqueued_collective", g.last_enqueued},
                                  {"last_started_collective", g.last_started},
                                  {"last_completed_collective", g.last_completed}};
  }
  j["pg_config"] = std::move(config);
  j["pg_status"] = std::move(status);
  auto entries = nlohmann::json::array();
  for (const auto& e : snapshot()) entries.push_back(entry_json(e, groups));
  j["entries"] = std::move(entries);
  return j;
}

std::string FlightRecorder::write_pytorch_dump(const std::string& dir, int rank) const {
  const nlohmann::json t = pytorch_trace();
  // The JSON copy's name must not contain fr_trace's prefix: its loader reads every file whose
  // name holds the prefix and takes the rest of the name as the rank.
  std::string err = write_atomic(dir, fmt::format("fr_trace_rank_{}.json", rank), t.dump(2) + "\n");
  if (err.empty()) {
    err =
        write_atomic(dir, fmt::format("nccl_trace_rank_{}", rank), to_pickle(t, {"process_group"}));
  }
  return err;
}

namespace {

struct OnDemand {
  std::mutex mu;
  std::weak_ptr<FlightRecorder> recorder;
  std::string dir;
  int rank = 0;
  int pipe_r = -1;
};
OnDemand& on_demand() {
  static auto* o = new OnDemand;  // lives as long as the detached watcher
  return *o;
}
std::atomic<int> g_dump_pipe_w{-1};

void on_dump_signal(int) {
  const int saved = errno;
  const int fd = g_dump_pipe_w.load(std::memory_order_relaxed);
  const char c = 1;
  if (fd >= 0) (void)!::write(fd, &c, 1);  // non-blocking: a full pipe already has a request
  errno = saved;
}

void dump_watcher() {
  OnDemand& o = on_demand();
  char buf[64];
  for (;;) {
    const ssize_t n = ::read(o.pipe_r, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::shared_ptr<FlightRecorder> rec;
    std::string dir;
    int rank = 0;
    {
      std::lock_guard lock(o.mu);
      rec = o.recorder.lock();
      dir = o.dir;
      rank = o.rank;
    }
    if (rec) rec->dump(dir, rank, "on demand (SIGUSR2)");
  }
}

}  // namespace

void FlightRecorder::enable_dump_on_signal(std::shared_ptr<FlightRecorder> recorder,
                                           std::string dir, int rank) {
  OnDemand& o = on_demand();
  std::filesystem::path d =
      dir.empty() ? std::filesystem::current_path() : std::filesystem::path(dir);
  {
    std::lock_guard lock(o.mu);
    if (o.recorder.lock() == recorder && o.dir == d.string() && o.rank == rank) return;
    o.recorder = recorder;
    o.dir = d.string();
    o.rank = rank;
  }
  static std::once_flag once;
  bool ok = true;
  std::call_once(once, [&] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      ok = false;
      return;
    }
    ::fcntl(fds[1], F_SETFL, ::fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    o.pipe_r = fds[0];
    g_dump_pipe_w.store(fds[1]);
    std::thread(dump_watcher).detach();
    struct sigaction sa {};
    sa.sa_handler = on_dump_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ok = ::sigaction(SIGUSR2, &sa, nullptr) == 0;
  });
  // The harness signals only ranks that announced they take the signal (its default action
  // would end a process that does not). Only under the harness (which sets FAULTLINE_RUN_ID for
  // every rank): a worker started by hand leaves no file behind.
  if (!ok || std::getenv("FAULTLINE_RUN_ID") == nullptr) return;
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  write_atomic(d, "fr_dump_on_signal", std::to_string(::getpid()) + "\n");
}

}  // namespace fl::comm
