// Every collective on the real MPI backend, run as 1, 2, 3, 4 and 8 ranks by ctest: exact values
// for every dtype and for odd and even counts, groups from split, verify-mode mismatches, and the
// flight recorder's record of what ran.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sched.h>
#include <sys/prctl.h>

#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "workloads/comm/mpi_communicator.hpp"

namespace fl::comm {
namespace {

const std::vector<DType> kDTypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32};
const std::vector<size_t> kCounts = {1, 2, 7, 64, 1000, 1023};

// Typed storage with conversion from/to double, so one test body covers every dtype.
struct Data {
  DType t;
  std::vector<uint8_t> bytes;
  Data(DType type, size_t n) : t(type), bytes(n * dtype_size(type)) {}
  size_t size() const { return bytes.size() / dtype_size(t); }
  void set(size_t i, double v) {
    switch (t) {
      case DType::kF32:
        reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(v);
        break;
      case DType::kF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = float_to_half(static_cast<float>(v));
        break;
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = float_to_bf16(static_cast<float>(v));
        break;
      case DType::kI32:
        reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(v);
        break;
      default:
        FAIL() << "dtype not covered";
    }
  }
  double get(size_t i) const {
    switch (t) {
      case DType::kF32:
        return reinterpret_cast<const float*>(bytes.data())[i];
      case DType::kF16:
        return half_to_float(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
      case DType::kBF16:
        return bf16_to_float(reinterpret_cast<const uint16_t*>(bytes.data())[i]);
      case DType::kI32:
        return reinterpret_cast<const int32_t*>(bytes.data())[i];
      default:
        return 0;
    }
  }
  // What storing `v` in this dtype gives back (the expected value after rounding).
  double round(double v) const {
    Data one(t, 1);
    one.set(0, v);
    return one.get(0);
  }
  Buffer buf() { return Buffer{bytes.data(), size(), t}; }
};

class Collectives : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    CommOptions o;
    o.timeout = std::chrono::milliseconds(60000);
    world_ = MpiCommunicator::create_world(mpi_world_rank(), mpi_world_size(), o).release();
  }
  static Communicator& world() { return *world_; }
  static int rank() { return world_->rank(); }
  static int size() { return world_->size(); }
  static inline Communicator* world_ = nullptr;
};

double value(int rank, size_t i) {
  return (rank + 1) + static_cast<double>(i % 5);
}

void check_all_reduce(Communicator& world, const std::vector<size_t>& counts) {
  const int n = world.size();
  const int rank = world.rank();
  for (DType t : kDTypes) {
    for (size_t count : counts) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        Data d(t, count);
        for (size_t i = 0; i < count; ++i) d.set(i, value(rank, i));
        world.all_reduce(d.buf(), op);
        for (size_t i = 0; i < count; ++i) {
          double sum = n * (n + 1) / 2.0 + n * static_cast<double>(i % 5);
          double want = 0;
          switch (op) {
            case ReduceOp::kSum:
              want = sum;
              break;
            case ReduceOp::kAvg:
              want = t == DType::kI32 ? static_cast<double>(static_cast<int>(sum) / n)
                                      : d.round(static_cast<float>(sum) / static_cast<float>(n));
              break;
            case ReduceOp::kMax:
              want = value(n - 1, i);
              break;
            case ReduceOp::kMin:
              want = value(0, i);
              break;
          }
          ASSERT_EQ(d.get(i), want) << dtype_name(t) << " count " << count << " op "
                                    << reduce_name(op) << " element " << i;
        }
      }
    }
  }
}

TEST_F(Collectives, AllReduceEveryOpDtypeAndCount) {
  check_all_reduce(world(), kCounts);
}

TEST_F(Collectives, AllReduceOnTheRingPathEveryOpDtypeAndCount) {
  // Large buffers take the ring algorithm; forcing it for every size covers uneven chunking
  // (count not a multiple of the group size) and counts smaller than the group (fallback).
  kRingMinBytes.set(1);
  check_all_reduce(world(), kCounts);
  kRingMinBytes.reset();
  check_all_reduce(world(), {140001});  // above the default threshold for 4-byte types
}

TEST_F(Collectives, ReduceScatterGivesEachRankItsBlock) {
  const int n = size();
  for (DType t : kDTypes) {
    for (size_t count : kCounts) {
      Data in(t, count * n);
      Data out(t, count);
      for (size_t j = 0; j < count * n; ++j) in.set(j, value(rank(), j));
      world().reduce_scatter(in.buf(), out.buf(), ReduceOp::kSum);
      for (size_t k = 0; k < count; ++k) {
        size_t j = static_cast<size_t>(rank()) * count + k;
        ASSERT_EQ(out.get(k), n * (n + 1) / 2.0 + n * static_cast<double>(j % 5))
            << dtype_name(t) << " count " << count << " element " << k;
      }
    }
  }
}

TEST_F(Collectives, AllGatherConcatenatesInRankOrder) {
  const int n = size();
  for (DType t : kDTypes) {
    for (size_t count : kCounts) {
      Data in(t, count);
      Data out(t, count * n);
      for (size_t k = 0; k < count; ++k) in.set(k, rank() * 16 + static_cast<double>(k % 7));
      world().all_gather(in.buf(), out.buf());
      for (int r = 0; r < n; ++r) {
        for (size_t k = 0; k < count; ++k) {
          ASSERT_EQ(out.get(r * count + k), r * 16 + static_cast<double>(k % 7))
              << dtype_name(t) << " count " << count << " block " << r;
        }
      }
    }
  }
}

TEST_F(Collectives, AllToAllSendsBlockRToRankRAndRecordsOneEntry) {
  const int n = size();
  for (DType t : kDTypes) {
    for (size_t count : kCounts) {
      // Block r of rank q holds q*16 + r*2 + k%2 (exact in bf16 up to 8 ranks).
      Data in(t, count * n), out(t, count * n);
      for (int r = 0; r < n; ++r) {
        for (size_t k = 0; k < count; ++k) in.set(r * count + k, rank() * 16 + r * 2 + k % 2);
      }
      const int64_t seq = world().next_seq();
      world().all_to_all(in.buf(), out.buf());
      for (int q = 0; q < n; ++q) {
        for (size_t k = 0; k < count; ++k) {
          ASSERT_EQ(out.get(q * count + k), q * 16 + rank() * 2 + static_cast<double>(k % 2))
              << dtype_name(t) << " count " << count << " from rank " << q;
        }
      }
      const FlightEntry e = world().recorder().snapshot().back();
      EXPECT_EQ(e.op, OpKind::kAllToAll);
      EXPECT_EQ(e.seq, seq);
      EXPECT_EQ(e.count, count * n);
      EXPECT_EQ(e.state, OpState::kCompleted);
    }
  }
  // Counts that do not split into one block per rank are refused before taking a number.
  std::vector<float> a(static_cast<size_t>(n) + 1), b(static_cast<size_t>(n) + 1);
  const int64_t seq = world().next_seq();
  if (n > 1) {
    try {
      world().all_to_all(host_buffer(a.data(), a.size(), DType::kF32),
                         host_buffer(b.data(), b.size(), DType::kF32));
      FAIL() << "expected a CommError";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format(
                    "all_to_all on group 'world': input is {0} x fp32, output {0} x fp32; both "
                    "must hold the same count, a multiple of the group size {1}, of the same "
                    "dtype",
                    n + 1, n)),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(world().next_seq(), seq);
}

TEST_F(Collectives, BroadcastFromLastRank) {
  const int root = size() - 1;
  for (DType t : kDTypes) {
    for (size_t count : kCounts) {
      Data d(t, count);
      for (size_t i = 0; i < count; ++i)
        d.set(i, rank() == root ? 3 + static_cast<double>(i % 11) : 0);
      world().broadcast(d.buf(), root);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(d.get(i), 3 + static_cast<double>(i % 11));
    }
  }
}

TEST_F(Collectives, SendRecvAroundARing) {
  const int n = size();
  if (n == 1) GTEST_SKIP() << "send/recv needs two ranks";
  const int next = (rank() + 1) % n;
  const int prev = (rank() + n - 1) % n;
  for (DType t : kDTypes) {
    for (size_t count : kCounts) {
      Data out(t, count);
      Data in(t, count);
      for (size_t i = 0; i < count; ++i) out.set(i, rank() * 10 + static_cast<double>(i % 3));
      if (rank() % 2 == 0) {
        world().send(out.buf(), next);
        world().recv(in.buf(), prev);
      } else {
        world().recv(in.buf(), prev);
        world().send(out.buf(), next);
      }
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(in.get(i), prev * 10 + static_cast<double>(i % 3));
    }
  }
}

// send_recv is one call of two ops (c10d's batched isend/irecv): both halves are checked before
// either is numbered, both are recorded (send first) and issued together, and verify mode does
// not fingerprint them (each half's partner is a different rank).
TEST_F(Collectives, SendRecvIsTwoRecordedOpsAndARefusedHalfConsumesNoSequenceNumber) {
  const int n = size();
  if (n == 1) GTEST_SKIP() << "send/recv needs two ranks";
  auto g = world().split(0, rank(), "sr");
  ASSERT_TRUE(g);
  g->set_timeout(std::chrono::milliseconds(60000));
  g->set_verify(true);
  const int next = (rank() + 1) % n;
  const int prev = (rank() + n - 1) % n;
  std::vector<float> out(100, static_cast<float>(rank() + 1)), in(100, -1.0f);
  try {
    g->send_recv(host_buffer(out.data(), 100, DType::kF32), next,
                 host_buffer(in.data(), 100, DType::kF32), n);
    FAIL() << "expected a CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format(
                  "recv on group 'sr': peer {} is out of range (group size {}, allowed 0-{})", n, n,
                  n - 1)),
              std::string::npos)
        << e.what();
  }
  g->send_recv(host_buffer(out.data(), 100, DType::kF32), next,
               host_buffer(in.data(), 100, DType::kF32), prev);
  EXPECT_EQ(in[0], static_cast<float>(prev + 1));
  EXPECT_EQ(in[99], static_cast<float>(prev + 1));
  auto entries = g->recorder().snapshot();
  ASSERT_GE(entries.size(), 2u);
  const FlightEntry& s = entries[entries.size() - 2];
  const FlightEntry& r = entries.back();
  EXPECT_EQ(s.op, OpKind::kSend);
  EXPECT_EQ(s.group, "sr");
  EXPECT_EQ(s.peer, next);
  EXPECT_EQ(s.seq, 0);  // the refused call numbered neither half
  EXPECT_EQ(s.state, OpState::kCompleted);
  EXPECT_EQ(r.op, OpKind::kRecv);
  EXPECT_EQ(r.peer, prev);
  EXPECT_EQ(r.seq, 0);
  EXPECT_EQ(r.state, OpState::kCompleted);
  EXPECT_EQ(r.id, s.id + 1);
  EXPECT_EQ(g->next_seq(), 0);  // p2p ops take no collective sequence number
  EXPECT_FALSE(g->broken());
}

// An environment variable set for one test and put back as it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CommSpin, AWaitSleepsSoonerWhereTheNodesRanksOutnumberItsCpus) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const std::string more = std::to_string(CPU_COUNT(&set) + 1);
  ScopedEnv spin("FAULTLINE_COMM_SPIN_US", nullptr);
  kCommSpinUs.reset();
  {
    ScopedEnv local("LOCAL_WORLD_SIZE", more.c_str());
    EXPECT_EQ(comm_spin(), std::chrono::microseconds(2000));
    EXPECT_EQ(CommOptions{}.spin, std::chrono::microseconds(2000));
  }
  {
    ScopedEnv local("LOCAL_WORLD_SIZE", nullptr);
    ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_SIZE", more.c_str());
    EXPECT_EQ(comm_spin(), std::chrono::microseconds(2000));
  }
  {
    ScopedEnv local("LOCAL_WORLD_SIZE", "1");
    EXPECT_EQ(comm_spin(), std::chrono::microseconds(20000));
  }
  {
    ScopedEnv local("LOCAL_WORLD_SIZE", "two");
    try {
      comm_spin();
      FAIL() << "expected a SettingError";
    } catch (const SettingError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCAL_WORLD_SIZE"), std::string::npos) << e.what();
    }
  }
  {
    // Set, the variable wins on any node.
    ScopedEnv local("LOCAL_WORLD_SIZE", more.c_str());
    ScopedEnv set_spin("FAULTLINE_COMM_SPIN_US", "7");
    kCommSpinUs.reset();
    EXPECT_EQ(comm_spin(), std::chrono::microseconds(7));
  }
  kCommSpinUs.reset();
}

TEST_F(Collectives, BarrierAndSequenceNumbers) {
  int64_t before = world().next_seq();
  world().barrier();
  world().barrier();
  EXPECT_EQ(world().next_seq(), before + 2);
  auto entries = world().recorder().snapshot();
  ASSERT_GE(entries.size(), 2u);
  EXPECT_EQ(entries.back().op, OpKind::kBarrier);
  EXPECT_EQ(entries.back().seq, before + 1);
  EXPECT_EQ(entries.back().state, OpState::kCompleted);
  EXPECT_GE(entries.back().t_completed_us, entries.back().t_started_us);
}

// What workers report per step as comm_ops_s: each op's own time, in order, adding up to the
// time in communicator operations; a step with more ops than the ring keeps reports none.
TEST_F(Collectives, EachOpsTimeIsKeptUntilTheRingForgetsIt) {
  const int64_t mark = comm_ops_ended();
  const int64_t ns0 = time_in_comm_ns();
  world().barrier();
  Data x(DType::kF32, 64);
  for (int i = 0; i < 3; ++i) world().all_reduce(x.buf());
  const auto ops = comm_op_seconds_since(mark);
  ASSERT_TRUE(ops.has_value());
  ASSERT_EQ(ops->size(), 4u);
  EXPECT_EQ(comm_ops_ended(), mark + 4);
  double sum = 0;
  for (double s : *ops) {
    EXPECT_GE(s, 0.0);
    sum += s;
  }
  EXPECT_NEAR(sum, static_cast<double>(time_in_comm_ns() - ns0) * 1e-9, 1e-6);
  EXPECT_FALSE(comm_op_seconds_since(comm_ops_ended() + 1).has_value());  // a mark not yet reached
  const int64_t mark2 = comm_ops_ended();
  for (int64_t i = 0; i < kCommOpsKept; ++i) world().barrier();
  EXPECT_EQ(comm_op_seconds_since(mark2)->size(), static_cast<size_t>(kCommOpsKept));
  world().barrier();
  EXPECT_FALSE(comm_op_seconds_since(mark2).has_value());  // the oldest is gone
  EXPECT_EQ(comm_op_seconds_since(comm_ops_ended())->size(), 0u);
}

TEST_F(Collectives, SplitIntoTensorAndDataParallelGroups) {
  const int n = size();
  // Megatron-style layout with tp = 2 when the world allows it: tp groups are consecutive ranks,
  // dp groups are strided.
  const int tp = n % 2 == 0 ? 2 : 1;
  auto tp_group = world().split(rank() / tp, rank(), "tp");
  auto dp_group = world().split(rank() % tp, rank(), "dp");
  ASSERT_NE(tp_group, nullptr);
  ASSERT_NE(dp_group, nullptr);
  EXPECT_EQ(tp_group->size(), tp);
  EXPECT_EQ(dp_group->size(), n / tp);
  EXPECT_EQ(tp_group->rank(), rank() % tp);
  EXPECT_EQ(dp_group->rank(), rank() / tp);
  EXPECT_EQ(tp_group->group(), "tp");

  int32_t v = rank();
  tp_group->all_reduce(host_buffer(&v, 1, DType::kI32));
  int first = rank() / tp * tp;
  EXPECT_EQ(v, tp == 2 ? first + first + 1 : first);
  int32_t w = rank();
  dp_group->all_reduce(host_buffer(&w, 1, DType::kI32));
  int expect = 0;
  for (int r = rank() % tp; r < n; r += tp) expect += r;
  EXPECT_EQ(w, expect);
  // Groups keep their own sequence numbers, the world's is untouched by group ops.
  EXPECT_EQ(tp_group->next_seq(), 1);

  // A negative color joins no group.
  auto none = world().split(rank() == 0 ? -1 : 0, rank(), "rest");
  EXPECT_EQ(none == nullptr, rank() == 0);
  if (none) {
    EXPECT_EQ(none->size(), n - 1);
  }
}

// A split creates its group from the exchanged colors and keys (MPI_Comm_create_group): the
// same members in the same order as MPI_Comm_split, ties in the key broken by parent rank.
TEST_F(Collectives, SplitGivesMpiCommSplitsMembersAndOrder) {
  const int n = size();
  const int color = rank() % 3;
  const int key = (n - rank()) / 2;  // descending, pairs of ranks tie
  auto ours = world().split(color, key, "thirds");
  ASSERT_NE(ours, nullptr);
  MPI_Comm theirs = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(static_cast<MpiCommunicator&>(world()).raw(), color, key, &theirs),
            MPI_SUCCESS);
  int their_rank = -1;
  int their_size = -1;
  MPI_Comm_rank(theirs, &their_rank);
  MPI_Comm_size(theirs, &their_size);
  EXPECT_EQ(ours->rank(), their_rank);
  EXPECT_EQ(ours->size(), their_size);
  int same = MPI_UNEQUAL;
  MPI_Comm_compare(static_cast<MpiCommunicator&>(*ours).raw(), theirs, &same);
  EXPECT_EQ(same, MPI_CONGRUENT);  // same members, same order
  MPI_Comm_free(&theirs);
  // The group works, and a second split of the same parent gets a communicator of its own.
  int32_t v = 1;
  ours->all_reduce(host_buffer(&v, 1, DType::kI32));
  EXPECT_EQ(v, their_size);
  auto again = world().split(color, key, "thirds-again");
  ASSERT_NE(again, nullptr);
  MPI_Comm_compare(static_cast<MpiCommunicator&>(*ours).raw(),
                   static_cast<MpiCommunicator&>(*again).raw(), &same);
  EXPECT_EQ(same, MPI_CONGRUENT);
}

// Joining the world raises the main thread's timer slack (FAULTLINE_MPI_START_SLACK_US) and puts
// the old value back once the world exists.
TEST_F(Collectives, WorldCreationLeavesTheTimerSlackAsItWas) {
  const int before = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  ASSERT_EQ(prctl(PR_SET_TIMERSLACK, 123000UL, 0, 0, 0), 0);
  auto w = MpiCommunicator::create_world(mpi_world_rank(), mpi_world_size());
  EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 123000);
  w->barrier();
  prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(before), 0, 0, 0);
}

TEST_F(Collectives, VerifyModeNamesTheRankCallingADifferentOp) {
  if (size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  auto g = world().split(0, rank(), "verify");
  g->set_verify(true);
  std::vector<float> buf(16, 1.0f), out(16 * static_cast<size_t>(size()));
  // Matching ops pass verification.
  g->all_reduce(host_buffer(buf.data(), buf.size(), DType::kF32));
  EXPECT_EQ(buf[0], static_cast<float>(size()));
  try {
    if (rank() == 1) {
      g->all_gather(host_buffer(buf.data(), 16, DType::kF32),
                    host_buffer(out.data(), out.size(), DType::kF32));
    } else {
      g->all_reduce(host_buffer(buf.data(), 16, DType::kF32));
    }
    FAIL() << "expected a CommMismatchError";
  } catch (const CommMismatchError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("collective mismatch on group 'verify'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 called all_gather(count 16, dtype fp32) at seq 1"),
              std::string::npos)
        << msg;
    std::string others =
        size() == 2 ? "rank 0"
                    : fmt::format("ranks 0,2{}", size() > 3 ? fmt::format("-{}", size() - 1) : "");
    EXPECT_NE(msg.find(others + " called all_reduce(count 16, dtype fp32, reduce sum) at seq 1"),
              std::string::npos)
        << msg;
  }
  EXPECT_TRUE(g->broken());
  EXPECT_THROW(g->barrier(), CommError);
}

TEST_F(Collectives, VerifyModeNamesACountMismatch) {
  if (size() < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  auto g = world().split(0, rank(), "verify-count");
  g->set_verify(true);
  std::vector<int32_t> buf(64, 1);
  size_t count = rank() == size() - 1 ? 48 : 64;
  try {
    g->all_reduce(host_buffer(buf.data(), count, DType::kI32));
    FAIL() << "expected a CommMismatchError";
  } catch (const CommMismatchError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(fmt::format("rank {} called all_reduce(count 48, dtype int32, reduce sum)",
                                   size() - 1)),
              std::string::npos)
        << msg;
  }
}

TEST_F(Collectives, VerifyModeNamesAP2PSizeMismatch) {
  if (size() < 2) GTEST_SKIP() << "p2p needs two ranks";
  auto g = world().split(rank() < 2 ? 0 : -1, rank(), "pp");
  if (!g) return;
  g->set_verify(true);
  std::vector<float> buf(32, 0.0f);
  try {
    if (rank() == 0) {
      g->send(host_buffer(buf.data(), 16, DType::kF32), 1);
    } else {
      g->recv(host_buffer(buf.data(), 32, DType::kF32), 0);
    }
    FAIL() << "expected a CommMismatchError";
  } catch (const CommMismatchError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("p2p mismatch on group 'pp'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0 called send(count 16, dtype fp32) at p2p seq 0"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rank 1 called recv(count 32, dtype fp32) at p2p seq 0"), std::string::npos)
        << msg;
  }
}

TEST_F(Collectives, BadArgumentsAreRejectedBeforeAnyCommunication) {
  std::vector<float> a(10), b(3);
  if (size() > 1) {
    EXPECT_THROW(world().reduce_scatter(host_buffer(a.data(), 10, DType::kF32),
                                        host_buffer(b.data(), 3, DType::kF32)),
                 CommError);
  }
  try {
    world().broadcast(host_buffer(a.data(), 10, DType::kF32), size());
    FAIL();
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("root {} is out of range (group size {}, "
                                                     "allowed 0-{})",
                                                     size(), size(), size() - 1)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(world().send(host_buffer(a.data(), 10, DType::kF32), rank()), CommError);
  // Rejected calls consume no sequence number and leave the communicator usable.
  world().barrier();
  EXPECT_FALSE(world().broken());
}

}  // namespace
}  // namespace fl::comm
