// The Communicator's public ops: each is an op (or two) for the prologue and the one path of
// communicator.cpp, with its own named fault site; split() also gives the new group's members a
// deadline before MPI_Comm_split or ncclCommSplit, which cannot time out themselves.
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "injector/site.hpp"
#include "workloads/comm/communicator.hpp"

namespace fl::comm {

namespace {
FlightEntry entry(OpKind op, const std::string& group, size_t count, DType dtype, ReduceOp r,
                  int peer) {
  FlightEntry e;
  e.op = op;
  e.group = group;
  e.count = count;
  e.dtype = dtype;
  e.reduce = r;
  e.peer = peer;
  return e;
}
}  // namespace

void Communicator::all_reduce(Buffer buf, ReduceOp op) {
  Op o{entry(OpKind::kAllReduce, group_, buf.count, buf.dtype, op, -1),
       buf,
       buf,
       1,
       1,
       [this, op](const Buffer& in, const Buffer&) { return start_all_reduce(in, op); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.all_reduce", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

void Communicator::reduce_scatter(const Buffer& in, Buffer out, ReduceOp op) {
  Op o{entry(OpKind::kReduceScatter, group_, in.count, in.dtype, op, -1),
       in,
       out,
       1,
       static_cast<size_t>(size_),
       [this, op](const Buffer& i, const Buffer& b) { return start_reduce_scatter(i, b, op); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.reduce_scatter", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

void Communicator::all_gather(const Buffer& in, Buffer out) {
  Op o{entry(OpKind::kAllGather, group_, in.count, in.dtype, ReduceOp::kSum, -1),
       in,
       out,
       static_cast<size_t>(size_),
       1,
       [this](const Buffer& i, const Buffer& b) { return start_all_gather(i, b); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.all_gather", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

void Communicator::broadcast(Buffer buf, int root) {
  Op o{entry(OpKind::kBroadcast, group_, buf.count, buf.dtype, ReduceOp::kSum, root),
       buf,
       buf,
       1,
       1,
       [this, root](const Buffer& b, const Buffer&) { return start_broadcast(b, root); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.broadcast", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

void Communicator::all_to_all(const Buffer& in, Buffer out) {
  Op o{entry(OpKind::kAllToAll, group_, in.count, in.dtype, ReduceOp::kSum, -1),
       in,
       out,
       1,
       1,
       [this](const Buffer& i, const Buffer& b) { return start_all_to_all(i, b); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.all_to_all", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

void Communicator::send(const Buffer& buf, int peer) {
  Op o{entry(OpKind::kSend, group_, buf.count, buf.dtype, ReduceOp::kSum, peer),
       buf,
       Buffer{},
       1,
       1,
       [this, peer](const Buffer& b, const Buffer&) { return start_send(b, peer, kDataTag); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.send", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

void Communicator::recv(Buffer buf, int peer) {
  Op o{entry(OpKind::kRecv, group_, buf.count, buf.dtype, ReduceOp::kSum, peer),
       buf,
       buf,
       1,
       1,
       [this, peer](const Buffer&, const Buffer& b) { return start_recv(b, peer, kDataTag); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.recv", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

// A group of two ops, as c10d's pointToPoint() batches isend/irecv: each half has its own fault
// site and verdict (it can fail, be dropped, be re-shaped, or be postponed after this rank's next
// op while the other half still runs now), and the halves that run are issued together.
void Communicator::send_recv(const Buffer& out, int send_peer, Buffer in, int recv_peer) {
  std::array<Op, 2> ops{
      Op{entry(OpKind::kSend, group_, out.count, out.dtype, ReduceOp::kSum, send_peer), out,
         Buffer{}, 1, 1,
         [this, send_peer](const Buffer& b, const Buffer&) {
           return start_send(b, send_peer, kDataTag);
         },
         []([[maybe_unused]] const SiteCall& s) {
           return FAULTLINE_FAULT_POINT("comm.send_recv.send", s.context());
         }},
      Op{entry(OpKind::kRecv, group_, in.count, in.dtype, ReduceOp::kSum, recv_peer), in, in, 1, 1,
         [this, recv_peer](const Buffer&, const Buffer& b) {
           return start_recv(b, recv_peer, kDataTag);
         },
         []([[maybe_unused]] const SiteCall& s) {
           return FAULTLINE_FAULT_POINT("comm.send_recv.recv", s.context());
         }}};
  prologue(ops);
  collective(ops);
}

void Communicator::barrier() {
  Op o{entry(OpKind::kBarrier, group_, 0, DType::kU8, ReduceOp::kSum, -1),
       Buffer{nullptr, 0, DType::kU8},
       Buffer{},
       1,
       1,
       [this](const Buffer&, const Buffer&) { return start_barrier(); },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.barrier", s.context());
       }};
  prologue(std::span(&o, 1));
  collective(std::span(&o, 1));
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  // Exchanging (color, key) first gives the split a deadline: MPI_Comm_split itself cannot time
  // out, but once every member has answered here it only waits on ranks known to be present.
  // The exchange owns its memory: a reorder fault runs it after this call has returned.
  auto mine = std::make_shared<std::array<int32_t, 2>>(std::array<int32_t, 2>{color, key});
  auto all = std::make_shared<std::vector<int32_t>>(2 * static_cast<size_t>(size_));
  Op o{entry(OpKind::kSplit, group_, 2, DType::kI32, ReduceOp::kSum, -1),
       Buffer{nullptr, 0, DType::kI32},
       Buffer{},
       1,
       1,
       [this, mine, all](const Buffer&, const Buffer&) {
         return start_all_gather(host_buffer(mine->data(), 2, DType::kI32),
                                 host_buffer(all->data(), all->size(), DType::kI32));
       },
       []([[maybe_unused]] const SiteCall& s) {
         return FAULTLINE_FAULT_POINT("comm.split", s.context());
       }};
  prologue(std::span(&o, 1));
  const int child_pg = reserve_child_pg();  // joining or not: ids agree across ranks
  const fault::Verdict v = o.v;
  if (v == fault::Verdict::kAlter) o.v = fault::Verdict::kProceed;  // no data to re-shape
  collective(std::span(&o, 1));
  // Dropped, or postponed after this rank's next op: the rank gets no group now.
  if (v == fault::Verdict::kSkip || v == fault::Verdict::kDefer) return nullptr;
  try {
    return adopt(do_split(color < 0 ? -1 : color, key, name, *all), child_pg, *all, color);
  } catch (const CommError& e) {
    broken_reason_ = e.what();
    throw;
  }
}

}  // namespace fl::comm
