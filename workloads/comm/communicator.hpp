// The one collective interface every workload uses. The base class does what is common to all
// backends — sequence numbers, argument checks, the fault site of each op, verify mode, the flight
// recorder and the deadline on every wait — and a backend only starts ops and tests them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/settings.hpp"
#include "injector/site.hpp"
#include "workloads/comm/errors.hpp"
#include "workloads/comm/flight_recorder.hpp"
#include "workloads/comm/types.hpp"

namespace fl::comm {

// A device buffer staged in host memory for a fault site (communicator.cpp).
class SiteData;

// Wall time this process has spent inside communicator operations (issuing, waiting, verify
// exchanges), all groups together, in nanoseconds since start. Workers report its growth per
// step: a rank that computes slowly makes its peers' time here grow, a slow link everyone's.
int64_t time_in_comm_ns();

// The wall time of each communicator operation of this process (the outermost ones, every group
// together), in the order they ended, kept for the last kCommOpsKept: comm_ops_ended() counts
// those ended so far, comm_op_seconds_since(mark) gives the durations of the ops that ended
// after the count was `mark`, or nullopt when more than kCommOpsKept did (the oldest are gone).
// Workers report a step's list: the harness takes each collective's least time over the ranks,
// the time of the rank that arrived last, which waited for no peer (docs/oracles.md, baseline).
inline constexpr int64_t kCommOpsKept = 128;
int64_t comm_ops_ended();
std::optional<std::vector<double>> comm_op_seconds_since(int64_t mark);

FAULTLINE_SETTING(kCommTimeoutMs, int64_t, "FAULTLINE_COMM_TIMEOUT_MS", 120000,
                  "Deadline of every collective and send/recv, in milliseconds");
FAULTLINE_SETTING(kCommVerify, bool, "FAULTLINE_COMM_VERIFY", false,
                  "Exchange op fingerprints before every op and fail on a mismatch");
FAULTLINE_SETTING(kFlightRecorderSize, int64_t, "FAULTLINE_FLIGHT_RECORDER_SIZE", 2048,
                  "Entries kept in each rank's flight recorder ring");
FAULTLINE_SETTING(kFlightRecorderDir, std::string, "FAULTLINE_FLIGHT_RECORDER_DIR", "",
                  "Directory for flight recorder dumps (default: the working directory)");
FAULTLINE_SETTING(kCommSpinUs, int64_t, "FAULTLINE_COMM_SPIN_US", 20000,
                  "How long a wait polls with sched_yield before it backs off to sleeping "
                  "(unset: 2000 where the node's ranks outnumber its CPUs)");
FAULTLINE_SETTING(kCommMaxSleepUs, int64_t, "FAULTLINE_COMM_MAX_SLEEP_US", 1000,
                  "Longest sleep between two polls of a pending op");

// The spin of a node whose ranks outnumber its CPUs.
inline constexpr std::chrono::microseconds kOversubscribedSpin{2000};
// How long a wait yield-polls before it sleeps: FAULTLINE_COMM_SPIN_US when set; unset, its
// default where every rank has a CPU, and kOversubscribedSpin where the node's ranks
// (LOCAL_WORLD_SIZE, else Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE) outnumber the CPUs this process
// may run on. There a polling rank holds the CPU its peer needs to send what it waits for (Open
// MPI yields when oversubscribed for the same reason); docs/comm.md has the measurements.
std::chrono::microseconds comm_spin();

struct CommOptions {
  std::chrono::milliseconds timeout{kCommTimeoutMs.get()};
  bool verify = kCommVerify.get();
  std::string dump_dir = kFlightRecorderDir.get();
  std::chrono::microseconds spin = comm_spin();
  std::chrono::microseconds max_sleep{kCommMaxSleepUs.get()};
};

// An op a backend has started. test() returns true once complete and throws CommError if the
// backend reports a failure.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int world_rank() const { return world_rank_; }
  const std::string& group() const { return group_; }
  virtual std::string_view backend() const = 0;

  // In place. kAvg divides the sum by size() (integer division for integer types).
  void all_reduce(Buffer buf, ReduceOp op = ReduceOp::kSum);
  // in.count == out.count * size(); rank r receives the reduction of block r.
  void reduce_scatter(const Buffer& in, Buffer out, ReduceOp op = ReduceOp::kSum);
  // out.count == in.count * size(); block r of out is rank r's input.
  void all_gather(const Buffer& in, Buffer out);
  void broadcast(Buffer buf, int root);
  // in.count == out.count, a multiple of size(); block r of `in` goes to rank r, block r of `out`
  // comes from rank r (torch's all_to_all_single with equal splits: MoE token dispatch).
  void all_to_all(const Buffer& in, Buffer out);
  void send(const Buffer& buf, int peer);
  void recv(Buffer buf, int peer);
  // Sends `out` to `send_peer` while receiving `in` from `recv_peer` (both started before either
  // is waited for, like Megatron's batched isend/irecv), so pipeline neighbours exchanging in
  // opposite directions cannot deadlock. Records a send and a recv entry; not fingerprinted in
  // verify mode.
  void send_recv(const Buffer& out, int send_peer, Buffer in, int recv_peer);
  void barrier();
  // Collective over this group. Ranks with the same color form a group ordered by key; a negative
  // color returns nullptr (the rank joins no group). `name` names the group in errors and logs.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name);

  FlightRecorder& recorder() { return *recorder_; }
  const CommOptions& options() const { return options_; }
  void set_timeout(std::chrono::milliseconds t) { options_.timeout = t; }
  void set_verify(bool v) { options_.verify = v; }
  int64_t next_seq() const { return seq_; }
  // True after a timeout or backend failure: every later op fails at once.
  bool broken() const { return !broken_reason_.empty(); }

 protected:
  Communicator(std::string group, int rank, int size, int world_rank,
               std::shared_ptr<FlightRecorder> recorder, CommOptions options);

  virtual std::unique_ptr<PendingOp> start_all_reduce(Buffer buf, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> start_reduce_scatter(const Buffer& in, Buffer out,
                                                          ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> start_all_gather(const Buffer& in, Buffer out) = 0;
  virtual std::unique_ptr<PendingOp> start_broadcast(Buffer buf, int root) = 0;
  virtual std::unique_ptr<PendingOp> start_send(const Buffer& buf, int peer, int tag) = 0;
  virtual std::unique_ptr<PendingOp> start_recv(Buffer buf, int peer, int tag) = 0;
  virtual std::unique_ptr<PendingOp> start_barrier() = 0;
  virtual std::unique_ptr<PendingOp> start_all_to_all(const Buffer& in, Buffer out) = 0;
  // Called once every member is known to be present (colors/keys exchanged with a deadline).
  // `colors_keys` holds every member's (color, key), in group-rank order.
  virtual std::unique_ptr<Communicator> do_split(int color, int key, const std::string& name,
                                                 const std::vector<int32_t>& colors_keys) = 0;
  // Called after a timeout, before the error is raised (NCCL aborts its communicator here).
  virtual void on_timeout() {}

  std::shared_ptr<FlightRecorder> shared_recorder() const { return recorder_; }
  static constexpr int kDataTag = 0;
  static constexpr int kVerifyTag = 1;

 private:
  // What an op's fault site sees: its context is built (device data staged) only while a plan is
  // armed. Each public op names its own site, a captureless lambda around FAULTLINE_FAULT_POINT.
  struct SiteCall;
  using SiteFn = fault::Verdict (*)(const SiteCall&);
  // One op as a public call made it: the entry the flight recorder and verify mode see, the
  // buffer it reads, the buffer it writes (the same one for in-place ops, none for send and
  // barrier; out elements = in elements * out_num / out_den), how a backend starts it on
  // (possibly re-shaped) buffers, its fault site and the verdict the site gave. Owns what a
  // postponed run needs.
  struct Op {
    FlightEntry d;
    Buffer in;
    Buffer out;
    size_t out_num = 1, out_den = 1;
    std::function<std::unique_ptr<PendingOp>(const Buffer& in, const Buffer& out)> start;
    SiteFn site = nullptr;
    fault::Verdict v = fault::Verdict::kProceed;
  };
  struct SiteCall {
    const Communicator& comm;
    const Op& op;
    SiteData& data;
    // The op's context: its seq, group, name, peer or root, and the data it reads (host memory).
    fault::SiteContext context() const;
  };
  // Ops issued together: one, or send_recv's two (as c10d's pointToPoint in a coalesced group).
  static constexpr size_t kMaxGroup = 2;
  // The prologue of every public op, written once: checks every op of the call (a refused call
  // consumes no sequence number), numbers them, then evaluates each one's fault site into op.v.
  void prologue(std::span<Op> ops);
  // The path every op takes after its prologue (as c10d's collective()): fails, drops or
  // postpones by verdict, re-shapes resized/retyped ops onto scratch, issues the others as one
  // group, copies scratch results back, then runs the oldest op postponed earlier; ops postponed
  // here wait for the next call.
  void collective(std::span<Op> ops);
  // `op` on the buffers a resize/retype verdict asks for (scratch holding the caller's leading
  // bytes); `op.d` then shows what was really called. Ops without data stay as they are.
  struct Shaped {
    Buffer in, out;
  };
  Shaped shaped(Op& op, fault::Verdict v);
  // An op of a group being issued: its buffers, its flight-recorder id, its pending backend op.
  struct Issued {
    Op* op = nullptr;
    Shaped b;
    uint64_t id = 0;
    std::unique_ptr<PendingOp> pending;
  };
  // Records, verifies (a lone op: send_recv's halves are not fingerprinted), starts and waits for
  // a group under the deadline. Started last to first, so send_recv's receive is posted before
  // its send; waited for first to last.
  void issue(std::span<Issued> group);
  void run_one_deferred();
  void check(const Op& op) const;
  int64_t take_seq(const FlightEntry& d);
  [[noreturn]] void fail_at_site(const FlightEntry& d) const;
  void wait(PendingOp& op, const FlightEntry& desc, uint64_t id, std::string_view phase);
  void check_usable(const FlightEntry& desc) const;
  void verify_collective(const FlightEntry& desc, uint64_t id);
  void verify_p2p(const FlightEntry& desc, uint64_t id);
  std::string describe(const FlightEntry& desc) const;
  // A kAlter verdict (resize, retype): `b` re-shaped as the fault asked, on scratch memory that
  // holds b's leading bytes; `d` is updated so the flight recorder shows what was really called.
  Buffer altered(const Buffer& b, FlightEntry& d);
  // The output of a two-buffer op (all_gather, reduce_scatter) shaped to match an altered input.
  Buffer altered_output(const Buffer& b, size_t count, DType dtype);
  static void copy_back(const Buffer& from, const Buffer& to);
  // Registers this group with the flight recorder on first use (a communicator not made by a
  // split is the world: its group ranks are world ranks) and arms the on-demand dump.
  void ensure_registered();
  // `d` with what the PyTorch-schema dump needs: process-group id, group rank and size, timeout.
  FlightEntry stamped(FlightEntry d);
  // The process-group id of a group split from this one (registers this group first).
  int reserve_child_pg();
  // Makes `child` (this group's split, or null) know its process-group id and its members' world
  // ranks from the (color, key) every member of this group sent; returns it.
  std::unique_ptr<Communicator> adopt(std::unique_ptr<Communicator> child, int pg_id,
                                      const std::vector<int32_t>& colors_keys, int color);

  std::string group_;
  std::vector<int> members_;  // world rank of each group rank
  int pg_id_ = -1;
  bool pg_registered_ = false;
  int rank_;
  int size_;
  int world_rank_;
  std::shared_ptr<FlightRecorder> recorder_;
  CommOptions options_;
  int64_t seq_ = 0;
  std::map<int, int64_t> p2p_send_seq_;
  std::map<int, int64_t> p2p_recv_seq_;
  std::string broken_reason_;
  // Ops a reorder fault postponed: each runs right after the next op of this communicator.
  std::vector<Op> deferred_;
  // Scratch of altered ops; kept for the communicator's life since a timed-out op may still
  // write into it.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> altered_scratch_;
};

}  // namespace fl::comm
