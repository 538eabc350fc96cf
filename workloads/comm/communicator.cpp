// Common logic of every Communicator: checks, sequence numbers, fault sites, verify mode, the
// flight recorder, and waiting with a deadline and back-off (no 100% busy spin, so an
// oversubscribed machine keeps making progress while a rank waits for a peer that never comes).
#include "workloads/comm/communicator.hpp"
#include "workloads/comm/device_copy.hpp"

#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/ranks.hpp"
#include "injector/site.hpp"

namespace fl::comm {

namespace {
// The bytes of a buffer in host memory (a copy for device buffers).
std::vector<uint8_t> host_bytes(const Buffer& b) {
  std::vector<uint8_t> h(b.bytes());
  copy_to_host(h.data(), b);
  return h;
}

}  // namespace

// Fault sites act on host memory: while a plan is armed, a device buffer is staged through a host
// copy for the site's evaluation and written back before the op runs (a corrupted gradient
// bucket reaches NCCL the same way it reaches MPI). Not in the anonymous namespace: the
// communicator's SiteCall (a member type, communicator.hpp) holds one.
class SiteData {
 public:
  void* of(const Buffer& b) {
    if (b.device == Device::kCpu || b.data == nullptr) return b.data;
    buf_ = b;
    copy_ = host_bytes(b);
    return copy_.data();
  }
  ~SiteData() {
    if (!copy_.empty()) copy_from_host(buf_, copy_.data());
  }

 private:
  Buffer buf_;
  std::vector<uint8_t> copy_;
};

namespace {

// Wall time inside communicator operations, every group of the process together. Only the
// outermost operation of a thread counts (a deferred op runs inside the next one).
std::atomic<int64_t> g_comm_ns{0};
thread_local int t_comm_depth = 0;

// The last kCommOpsKept operations' durations, a ring indexed by the count of ended ops.
struct OpTimes {
  std::mutex mu;
  std::array<int64_t, kCommOpsKept> ns{};
  int64_t ended = 0;
};
OpTimes& op_times() {
  static OpTimes t;
  return t;
}

class CommClock {
 public:
  CommClock() : outer_(t_comm_depth++ == 0), t0_(std::chrono::steady_clock::now()) {}
  ~CommClock() {
    --t_comm_depth;
    if (!outer_) return;
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
            .count();
    g_comm_ns.fetch_add(ns, std::memory_order_relaxed);
    auto& t = op_times();
    const std::lock_guard<std::mutex> lock(t.mu);
    t.ns[static_cast<size_t>(t.ended % kCommOpsKept)] = ns;
    ++t.ended;
  }
  CommClock(const CommClock&) = delete;
  CommClock& operator=(const CommClock&) = delete;

 private:
  bool outer_;
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace

int64_t time_in_comm_ns() {
  return g_comm_ns.load(std::memory_order_relaxed);
}

int64_t comm_ops_ended() {
  auto& t = op_times();
  const std::lock_guard<std::mutex> lock(t.mu);
  return t.ended;
}

std::optional<std::vector<double>> comm_op_seconds_since(int64_t mark) {
  auto& t = op_times();
  const std::lock_guard<std::mutex> lock(t.mu);
  if (mark < 0 || mark > t.ended || t.ended - mark > kCommOpsKept) return std::nullopt;
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.ended - mark));
  for (int64_t i = mark; i < t.ended; ++i) {
    out.push_back(static_cast<double>(t.ns[static_cast<size_t>(i % kCommOpsKept)]) * 1e-9);
  }
  return out;
}

namespace {
// Ranks on this node as the launcher says (torchrun's name, then mpirun's); 0 when it does not.
int64_t ranks_on_node() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return parse_setting<int64_t>(name, v);
  }
  return 0;
}

int64_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int64_t>(std::thread::hardware_concurrency());
}
}  // namespace

std::chrono::microseconds comm_spin() {
  const std::chrono::microseconds spin(kCommSpinUs.get());
  if (kCommSpinUs.is_set_in_env() || ranks_on_node() <= usable_cpus()) return spin;
  return std::min(spin, kOversubscribedSpin);
}

namespace {

// What ranks exchange in verify mode before an op. Fixed layout: it travels as bytes.
struct Fingerprint {
  uint8_t op = 0;
  uint8_t dtype = 0;
  uint8_t reduce = 0;
  uint8_t pad = 0;
  int32_t peer = -1;
  int64_t count = 0;
  int64_t seq = -1;
  bool operator==(const Fingerprint&) const = default;
};
static_assert(sizeof(Fingerprint) == 24);

Fingerprint fingerprint_of(const FlightEntry& d) {
  Fingerprint f;
  f.op = static_cast<uint8_t>(d.op);
  f.dtype = static_cast<uint8_t>(d.dtype);
  f.reduce = static_cast<uint8_t>(d.reduce);
  f.peer = d.peer;
  f.count = static_cast<int64_t>(d.count);
  f.seq = d.seq;
  return f;
}

std::string describe_fingerprint(const Fingerprint& f) {
  auto op = static_cast<OpKind>(f.op);
  std::string s = fmt::format("{}(count {}, dtype {}", op_name(op), f.count,
                              dtype_name(static_cast<DType>(f.dtype)));
  if (op == OpKind::kAllReduce || op == OpKind::kReduceScatter) {
    s += fmt::format(", reduce {}", reduce_name(static_cast<ReduceOp>(f.reduce)));
  }
  if (op == OpKind::kBroadcast) s += fmt::format(", root {}", f.peer);
  s += fmt::format(") at seq {}", f.seq);
  return s;
}

}  // namespace

Communicator::Communicator(std::string group, int rank, int size, int world_rank,
                           std::shared_ptr<FlightRecorder> recorder, CommOptions options)
    : group_(std::move(group)),
      rank_(rank),
      size_(size),
      world_rank_(world_rank),
      recorder_(std::move(recorder)),
      options_(std::move(options)) {}

std::string Communicator::describe(const FlightEntry& d) const {
  if (d.op == OpKind::kSend || d.op == OpKind::kRecv) {
    return fmt::format("{} {} rank {} on group '{}' (p2p seq {}, count {}, dtype {})",
                       op_name(d.op), d.op == OpKind::kSend ? "to" : "from", d.peer, group_, d.seq,
                       d.count, dtype_name(d.dtype));
  }
  std::string extra;
  if (d.op == OpKind::kAllReduce || d.op == OpKind::kReduceScatter) {
    extra = fmt::format(", reduce {}", reduce_name(d.reduce));
  } else if (d.op == OpKind::kBroadcast) {
    extra = fmt::format(", root {}", d.peer);
  }
  return fmt::format("{} on group '{}' (seq {}, count {}, dtype {}{})", op_name(d.op), group_,
                     d.seq, d.count, dtype_name(d.dtype), extra);
}

void Communicator::check_usable(const FlightEntry& d) const {
  if (!broken_reason_.empty()) {
    raise<CommError>(
        "[rank {}] {} refused: communicator of group '{}' is unusable after an "
        "earlier failure: {}",
        world_rank_, op_name(d.op), group_, broken_reason_);
  }
  if (d.op == OpKind::kSend || d.op == OpKind::kRecv || d.op == OpKind::kBroadcast) {
    if (d.peer < 0 || d.peer >= size_) {
      raise<CommError>(
          "[rank {}] {} on group '{}': {} {} is out of range (group size {}, allowed "
          "0-{})",
          world_rank_, op_name(d.op), group_, d.op == OpKind::kBroadcast ? "root" : "peer", d.peer,
          size_, size_ - 1);
    }
    if (d.op != OpKind::kBroadcast && d.peer == rank_) {
      raise<CommError>("[rank {}] {} on group '{}': peer {} is this rank itself", world_rank_,
                       op_name(d.op), group_, d.peer);
    }
  }
}

void Communicator::fail_at_site(const FlightEntry& d) const {
  raise<CommError>("[rank {}] {} failed: error returned by an armed fault site", world_rank_,
                   describe(d));
}

void Communicator::check(const Op& op) const {
  check_usable(op.d);
  const Buffer &in = op.in, &out = op.out;
  if (op.d.op == OpKind::kReduceScatter &&
      (in.count != out.count * static_cast<size_t>(size_) || in.dtype != out.dtype)) {
    raise<CommError>(
        "[rank {}] reduce_scatter on group '{}': input is {} x {}, output {} x {}; "
        "the input must hold output count x group size ({} x {}) of the same dtype",
        world_rank_, group_, in.count, dtype_name(in.dtype), out.count, dtype_name(out.dtype),
        out.count, size_);
  }
  if (op.d.op == OpKind::kAllGather &&
      (out.count != in.count * static_cast<size_t>(size_) || in.dtype != out.dtype)) {
    raise<CommError>(
        "[rank {}] all_gather on group '{}': input is {} x {}, output {} x {}; the "
        "output must hold input count x group size ({} x {}) of the same dtype",
        world_rank_, group_, in.count, dtype_name(in.dtype), out.count, dtype_name(out.dtype),
        in.count, size_);
  }
  if (op.d.op == OpKind::kAllToAll && (in.count != out.count || in.dtype != out.dtype ||
                                       in.count % static_cast<size_t>(size_) != 0)) {
    raise<CommError>(
        "[rank {}] all_to_all on group '{}': input is {} x {}, output {} x {}; both must hold "
        "the same count, a multiple of the group size {}, of the same dtype",
        world_rank_, group_, in.count, dtype_name(in.dtype), out.count, dtype_name(out.dtype),
        size_);
  }
}

int64_t Communicator::take_seq(const FlightEntry& d) {
  if (d.op == OpKind::kSend) return p2p_send_seq_[d.peer]++;
  if (d.op == OpKind::kRecv) return p2p_recv_seq_[d.peer]++;
  return seq_++;
}

fault::SiteContext Communicator::SiteCall::context() const {
  return {op.d.seq,       comm.group_, op_name(op.d.op), op.d.peer,
          data.of(op.in), op.in.count, op.in.dtype,      -1};
}

void Communicator::prologue(std::span<Op> ops) {
  for (const Op& op : ops) check(op);
  for (Op& op : ops) op.d.seq = take_seq(op.d);
  for (Op& op : ops) {
    SiteData data;  // a staged device buffer is written back before the op runs
    op.v = op.site(SiteCall{*this, op, data});
  }
}

Communicator::Shaped Communicator::shaped(Op& op, fault::Verdict v) {
  // Barrier and split carry no data a resize or retype could change.
  if (v != fault::Verdict::kAlter || (op.in.data == nullptr && op.out.data == nullptr)) {
    return {op.in, op.out};
  }
  Shaped r;
  r.in = altered(op.in, op.d);
  if (op.out.data == nullptr) {
    r.out = op.out;
  } else if (op.out.data == op.in.data) {
    r.out = r.in;  // in place: the op writes the scratch it read
  } else {
    r.out = altered_output(op.out, r.in.count * op.out_num / op.out_den, r.in.dtype);
  }
  return r;
}

void Communicator::collective(std::span<Op> ops) {
  for (const Op& op : ops) {
    if (op.v == fault::Verdict::kFail) fail_at_site(op.d);
  }
  // A dropped op never happens on this rank: nothing is recorded, as with a real missed call (the
  // injector's fired log is the ground truth). A postponed one (reorder) is issued after this
  // rank's next op, as code that walks its buckets or groups in a different order does; the
  // caller goes on with its buffer not yet reduced.
  std::array<Issued, kMaxGroup> group;
  size_t n = 0;
  for (Op& op : ops) {
    if (op.v == fault::Verdict::kSkip || op.v == fault::Verdict::kDefer) continue;
    Issued& i = group.at(n++);  // at most send_recv's two
    i.op = &op;
    i.b = shaped(op, op.v);
  }
  if (n > 0) {
    issue(std::span(group.data(), n));
    // An op postponed earlier runs after this one; one postponed now, after the next one.
    run_one_deferred();
  }
  for (Op& op : ops) {
    if (op.v == fault::Verdict::kDefer) deferred_.push_back(std::move(op));
  }
}

void Communicator::run_one_deferred() {
  if (deferred_.empty()) return;
  Op later = std::move(deferred_.front());
  deferred_.erase(deferred_.begin());
  later.v = fault::Verdict::kProceed;
  collective(std::span(&later, 1));
}

void Communicator::issue(std::span<Issued> group) {
  CommClock clock;
  for (Issued& i : group) i.id = recorder_->record(stamped(i.op->d));
  try {
    if (options_.verify && group.size() == 1) {
      const FlightEntry& d = group[0].op->d;
      if (is_collective(d.op)) {
        verify_collective(d, group[0].id);
      } else {
        verify_p2p(d, group[0].id);
      }
    }
    for (auto i = group.rbegin(); i != group.rend(); ++i) {
      i->pending = i->op->start(i->b.in, i->b.out);
    }
    for (auto i = group.rbegin(); i != group.rend(); ++i) {
      recorder_->set_state(i->id, OpState::kStarted);
    }
    for (Issued& i : group) {
      wait(*i.pending, i.op->d, i.id, "");
      recorder_->set_state(i.id, OpState::kCompleted);
    }
  } catch (const CommTimeoutError&) {
    // The backend may still write into the ops' staging memory: keep it alive. wait() has
    // recorded the state and dumped the recorder.
    for (Issued& i : group) (void)i.pending.release();
    throw;
  } catch (const CommError& e) {
    for (Issued& i : group) recorder_->set_state(i.id, OpState::kFailed);
    broken_reason_ = e.what();
    throw;
  }
  for (const Issued& i : group) {
    if (i.b.out.data != nullptr && i.b.out.data != i.op->out.data) copy_back(i.b.out, i.op->out);
  }
}

Buffer Communicator::altered(const Buffer& b, FlightEntry& d) {
  const fault::SiteContext& c = fault::altered_context();
  auto& s = altered_scratch_.emplace_back(
      std::make_unique<std::vector<uint8_t>>(c.count * dtype_size(c.dtype)));
  Buffer out{s->data(), c.count, c.dtype, Device::kCpu, 0};
  const auto src = host_bytes(b);  // the altered op runs on host scratch, whatever b's device
  std::memcpy(out.data, src.data(), std::min(out.bytes(), src.size()));
  d.count = c.count;
  d.dtype = c.dtype;
  return out;
}

Buffer Communicator::altered_output(const Buffer& b, size_t count, DType dtype) {
  auto& s = altered_scratch_.emplace_back(
      std::make_unique<std::vector<uint8_t>>(count * dtype_size(dtype)));
  Buffer out{s->data(), count, dtype, Device::kCpu, 0};
  const auto src = host_bytes(b);
  std::memcpy(out.data, src.data(), std::min(out.bytes(), src.size()));
  return out;
}

void Communicator::copy_back(const Buffer& from, const Buffer& to) {
  if (to.device == Device::kCpu) {
    std::memcpy(to.data, from.data, std::min(from.bytes(), to.bytes()));
    return;
  }
  auto bytes = host_bytes(to);
  std::memcpy(bytes.data(), from.data, std::min(from.bytes(), bytes.size()));
  copy_from_host(to, bytes.data());
}

void Communicator::wait(PendingOp& op, const FlightEntry& d, uint64_t id, std::string_view phase) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto deadline = t0 + options_.timeout;
  const auto spin_end = t0 + options_.spin;
  auto sleep = std::chrono::microseconds(20);
  while (!op.test()) {
    const auto now = clock::now();
    if (now >= deadline) {
      recorder_->set_state(id, OpState::kTimedOut);
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(now - t0).count();
      std::string what = fmt::format("{}{} did not complete after {} ms (timeout {} ms)",
                                     describe(d), phase, elapsed, options_.timeout.count());
      std::string path = recorder_->dump(options_.dump_dir, world_rank_, what);
      on_timeout();
      broken_reason_ = "timeout of " + describe(d);
      throw CommTimeoutError(fmt::format("[rank {}] comm timeout: {}; flight recorder dumped to {}",
                                         world_rank_, what, path),
                             path, timeout_info(d, size_, elapsed, options_.timeout.count()));
    }
    if (now < spin_end) {
      sched_yield();
      continue;
    }
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    std::this_thread::sleep_for(std::min(sleep, left));
    sleep = std::min(sleep * 2, options_.max_sleep);
  }
}

void Communicator::verify_collective(const FlightEntry& d, uint64_t id) {
  Fingerprint mine = fingerprint_of(d);
  std::vector<Fingerprint> all(static_cast<size_t>(size_));
  auto pending = start_all_gather(host_buffer(&mine, sizeof(mine), DType::kU8),
                                  host_buffer(all.data(), all.size() * sizeof(mine), DType::kU8));
  wait(*pending, d, id, " (verify: fingerprint exchange)");
  if (std::all_of(all.begin(), all.end(), [&](const Fingerprint& f) { return f == all[0]; })) {
    return;
  }
  // Group ranks by what they called; the largest group is "the others".
  std::vector<std::pair<Fingerprint, std::vector<int>>> groups;
  for (int r = 0; r < size_; ++r) {
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == all[r]; });
    if (it == groups.end()) {
      groups.push_back({all[r], {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](auto& a, auto& b) { return a.second.size() > b.second.size(); });
  std::string msg =
      fmt::format("[rank {}] collective mismatch on group '{}': ", world_rank_, group_);
  for (size_t i = 1; i < groups.size(); ++i) {
    msg += fmt::format("{} called {}; ", format_ranks(groups[i].second),
                       describe_fingerprint(groups[i].first));
  }
  msg += fmt::format("{} called {}", format_ranks(groups[0].second),
                     describe_fingerprint(groups[0].first));
  throw CommMismatchError(msg);
}

void Communicator::verify_p2p(const FlightEntry& d, uint64_t id) {
  Fingerprint mine = fingerprint_of(d);
  mine.peer = rank_;
  Fingerprint theirs;
  auto s = start_send(host_buffer(&mine, sizeof(mine), DType::kU8), d.peer, kVerifyTag);
  auto r = start_recv(host_buffer(&theirs, sizeof(theirs), DType::kU8), d.peer, kVerifyTag);
  wait(*s, d, id, " (verify: fingerprint exchange)");
  wait(*r, d, id, " (verify: fingerprint exchange)");
  auto want = d.op == OpKind::kSend ? OpKind::kRecv : OpKind::kSend;
  if (static_cast<OpKind>(theirs.op) == want && theirs.count == mine.count &&
      theirs.dtype == mine.dtype && theirs.seq == mine.seq) {
    return;
  }
  auto side = [](const Fingerprint& f) {
    auto op = static_cast<OpKind>(f.op);
    return fmt::format("{}(count {}, dtype {}) at p2p seq {}",
                       op == OpKind::kSend   ? "send"
                       : op == OpKind::kRecv ? "recv"
                                             : op_name(op),
                       f.count, dtype_name(static_cast<DType>(f.dtype)), f.seq);
  };
  raise<CommMismatchError>(
      "[rank {}] p2p mismatch on group '{}' between rank {} and rank {}: rank {} called {}, "
      "rank {} called {}",
      world_rank_, group_, rank_, d.peer, rank_, side(mine), d.peer, side(theirs));
}

}  // namespace fl::comm
