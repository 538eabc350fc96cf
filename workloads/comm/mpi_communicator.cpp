// MPI backend. Every op is a non-blocking MPI call (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// ...) so the base class can poll it against a deadline; large all-reduces take the ring
// (mpi_ring.cpp); fp16 and bf16 reduce through mpi_ops.cpp; the world is made in mpi_world.cpp.
#include "workloads/comm/mpi_communicator.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "workloads/comm/mpi_detail.hpp"
#include "workloads/comm/nccl_error.hpp"
#include "workloads/comm/shm_transport.hpp"

namespace fl::comm {

using mpi::checked_count;
using mpi::divide_in_place;
using mpi::HostView;
using mpi::MpiPending;

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string group, int world_rank,
                                 std::shared_ptr<FlightRecorder> recorder, CommOptions options)
    : Communicator(
          std::move(group),
          [&] {
            int r = 0;
            MPI_Comm_rank(comm, &r);
            return r;
          }(),
          [&] {
            int n = 0;
            MPI_Comm_size(comm, &n);
            return n;
          }(),
          world_rank, std::move(recorder), std::move(options)),
      comm_(comm) {}

MpiCommunicator::~MpiCommunicator() {
  if (buffer_acct_ != nullptr) buffer_acct_->release(buffer_bytes_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!leaked_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

namespace {
// An NCCL size variable as NCCL reads it: absent, the default; else a positive integer.
size_t nccl_env(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || n <= 0 || errno == ERANGE) {
    throw ConfigError(
        fmt::format("{}='{}' is not a positive integer (NCCL reads bytes or a count)", name, v));
  }
  return static_cast<size_t>(n);
}
}  // namespace

size_t nccl_connection_bytes() {
  const size_t buffsize = nccl_env("NCCL_BUFFSIZE", size_t{4} << 20);
  size_t channels = nccl_env("NCCL_MIN_NCHANNELS", 2);
  channels = std::min(channels, nccl_env("NCCL_MAX_NCHANNELS", channels));
  size_t bytes = 0;
  if (__builtin_mul_overflow(buffsize, channels, &bytes) ||
      __builtin_mul_overflow(bytes, size_t{2}, &bytes)) {
    throw ConfigError(fmt::format(
        "NCCL_BUFFSIZE={} x {} channels x 2 overflows a size: no device holds that many bytes "
        "of connection buffers",
        buffsize, channels));
  }
  return bytes;
}

void MpiCommunicator::connect_buffers(const Buffer& buf) {
  if (buffers_checked_) return;
  buffers_checked_ = true;
  if (!kCommDeviceBuffers.get() || size() < 2) return;
  // The ring's send and receive connections of every channel, on the device of the data: NCCL
  // allocates them as the group's first collective connects its peers (NCCL 2.12's lazy
  // connection; earlier releases at init).
  const size_t bytes = nccl_connection_bytes();
  MemoryAccountant& acct =
      buf.device == Device::kCuda ? MemoryAccountant::cuda(buf.device_id) : MemoryAccountant::cpu();
  try {
    acct.reserve(bytes, "comm.nccl_buffers");
  } catch (const OutOfMemoryError& e) {
    throw CommError(fmt::format(
        "NCCL WARN Cuda failure 'out of memory' connecting group '{}' (rank {}): {} ({} bytes of "
        "connection buffers for its first collective, 2 x NCCL_BUFFSIZE x channels; {})",
        group(), rank(),
        format_nccl_error(1, "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                          "Cuda failure 'out of memory'", ""),
        bytes, e.what()));
  }
  buffer_bytes_ = bytes;
  buffer_acct_ = &acct;
}

void MpiCommunicator::on_timeout() {
  leaked_ = true;
  mpi::g_dirty.store(true);
}

std::unique_ptr<PendingOp> MpiCommunicator::start_all_reduce(Buffer buf, ReduceOp op) {
  connect_buffers(buf);
  auto view = std::make_unique<HostView>(buf, true);
  void* host = view->data();
  const int size = this->size();
  HostView* v = view.get();
  auto finish = [v, host, buf, op, size] {
    if (op == ReduceOp::kAvg) divide_in_place(host, buf.count, buf.dtype, size);
    v->store_back();
  };
  int n = checked_count(buf.count, "all_reduce");
  if (!shm_checked_) {  // the first all-reduce of every member sets the transport up
    shm_checked_ = true;
    shm_ = ShmTransport::create(comm_, rank(), size, group(), world_rank());
  }
  if (shm_) {
    return shm_->all_reduce(
        host, buf.count, buf.dtype, op,
        fmt::format("all_reduce (count {}, dtype {})", buf.count, dtype_name(buf.dtype)),
        [finish, keep = std::shared_ptr<HostView>(std::move(view))] { finish(); });
  }
  const auto ring_min = static_cast<size_t>(std::max<int64_t>(0, kRingMinBytes.get()));
  const auto group_size = static_cast<size_t>(size);
  if (size > 1 && buf.bytes() >= ring_min && buf.count >= group_size &&
      buf.bytes() / group_size < static_cast<size_t>(std::numeric_limits<int>::max())) {
    return mpi::ring_all_reduce(
        comm_, rank(), size, host, buf.count, buf.dtype, op, group(), world_rank(), ring_scratch_,
        [finish, keep = std::shared_ptr<HostView>(std::move(view))] { finish(); });
  }
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  mpi::check(MPI_Iallreduce(MPI_IN_PLACE, host, n, mpi::type_of(buf.dtype),
                            mpi::op_of(op, buf.dtype), comm_, p->request()),
             "MPI_Iallreduce", group(), world_rank());
  p->on_finish(finish);
  p->views.push_back(std::move(view));
  return p;
}

std::unique_ptr<PendingOp> MpiCommunicator::start_reduce_scatter(const Buffer& in, Buffer out,
                                                                 ReduceOp op) {
  connect_buffers(in);
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  auto vin = std::make_unique<HostView>(in, true);
  auto vout = std::make_unique<HostView>(out, false);
  int n = checked_count(out.count, "reduce_scatter");
  mpi::check(MPI_Ireduce_scatter_block(vin->data(), vout->data(), n, mpi::type_of(in.dtype),
                                       mpi::op_of(op, in.dtype), comm_, p->request()),
             "MPI_Ireduce_scatter_block", group(), world_rank());
  HostView* v = vout.get();
  int size = this->size();
  p->on_finish([v, out, op, size] {
    if (op == ReduceOp::kAvg) divide_in_place(v->data(), out.count, out.dtype, size);
    v->store_back();
  });
  p->views.push_back(std::move(vin));
  p->views.push_back(std::move(vout));
  return p;
}

std::unique_ptr<PendingOp> MpiCommunicator::start_all_gather(const Buffer& in, Buffer out) {
  connect_buffers(in);
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  auto vin = std::make_unique<HostView>(in, true);
  auto vout = std::make_unique<HostView>(out, false);
  int n = checked_count(in.count, "all_gather");
  mpi::check(MPI_Iallgather(vin->data(), n, mpi::type_of(in.dtype), vout->data(), n,
                            mpi::type_of(in.dtype), comm_, p->request()),
             "MPI_Iallgather", group(), world_rank());
  HostView* v = vout.get();
  p->on_finish([v] { v->store_back(); });
  p->views.push_back(std::move(vin));
  p->views.push_back(std::move(vout));
  return p;
}

std::unique_ptr<PendingOp> MpiCommunicator::start_all_to_all(const Buffer& in, Buffer out) {
  connect_buffers(in);
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  auto vin = std::make_unique<HostView>(in, true);
  auto vout = std::make_unique<HostView>(out, false);
  int n = checked_count(in.count / static_cast<size_t>(size()), "all_to_all");
  mpi::check(MPI_Ialltoall(vin->data(), n, mpi::type_of(in.dtype), vout->data(), n,
                           mpi::type_of(in.dtype), comm_, p->request()),
             "MPI_Ialltoall", group(), world_rank());
  HostView* v = vout.get();
  p->on_finish([v] { v->store_back(); });
  p->views.push_back(std::move(vin));
  p->views.push_back(std::move(vout));
  return p;
}

std::unique_ptr<PendingOp> MpiCommunicator::start_broadcast(Buffer buf, int root) {
  connect_buffers(buf);
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  auto view = std::make_unique<HostView>(buf, rank() == root);
  int n = checked_count(buf.count, "broadcast");
  mpi::check(MPI_Ibcast(view->data(), n, mpi::type_of(buf.dtype), root, comm_, p->request()),
             "MPI_Ibcast", group(), world_rank());
  HostView* v = view.get();
  p->on_finish([v] { v->store_back(); });
  p->views.push_back(std::move(view));
  return p;
}

std::unique_ptr<PendingOp> MpiCommunicator::start_send(const Buffer& buf, int peer, int tag) {
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  auto view = std::make_unique<HostView>(buf, true);
  int n = checked_count(buf.count, "send");
  mpi::check(MPI_Isend(view->data(), n, mpi::type_of(buf.dtype), peer, tag, comm_, p->request()),
             "MPI_Isend", group(), world_rank());
  p->views.push_back(std::move(view));
  return p;
}

std::unique_ptr<PendingOp> MpiCommunicator::start_recv(Buffer buf, int peer, int tag) {
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  auto view = std::make_unique<HostView>(buf, false);
  int n = checked_count(buf.count, "recv");
  mpi::check(MPI_Irecv(view->data(), n, mpi::type_of(buf.dtype), peer, tag, comm_, p->request()),
             "MPI_Irecv", group(), world_rank());
  HostView* v = view.get();
  p->on_finish([v] { v->store_back(); });
  p->views.push_back(std::move(view));
  return p;
}

std::unique_ptr<PendingOp> MpiCommunicator::start_barrier() {
  auto p = std::make_unique<MpiPending>(group(), world_rank());
  mpi::check(MPI_Ibarrier(comm_, p->request()), "MPI_Ibarrier", group(), world_rank());
  return p;
}

// The group is known from the exchanged (color, key) of every member, so it is built locally and
// only its own members agree on it: MPI_Comm_create_group is collective over the group, where
// MPI_Comm_split would gather every member's color again and agree on the context id across the
// whole parent (at 128 ranks on two cores, each such world-wide agreement costs seconds). Same
// members, same order as MPI_Comm_split: by key, ties by parent rank.
std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key, const std::string& name,
                                                        const std::vector<int32_t>& colors_keys) {
  (void)key;  // already in colors_keys, at this rank's place
  const int tag =
      kSplitTagBase + (splits_++ % kSplitTags);  // every member splits in the same order
  if (color < 0) return nullptr;
  std::vector<std::pair<int32_t, int>> order;  // (key, parent rank)
  for (int i = 0; i < size(); ++i) {
    if (colors_keys[2 * static_cast<size_t>(i)] == color) {
      order.emplace_back(colors_keys[2 * static_cast<size_t>(i) + 1], i);
    }
  }
  std::sort(order.begin(), order.end());
  std::vector<int> ranks;
  ranks.reserve(order.size());
  for (const auto& [k, i] : order) ranks.push_back(i);
  MPI_Group parent = MPI_GROUP_NULL;
  MPI_Group sub = MPI_GROUP_NULL;
  mpi::check(MPI_Comm_group(comm_, &parent), "MPI_Comm_group", group(), world_rank());
  const int rc = MPI_Group_incl(parent, static_cast<int>(ranks.size()), ranks.data(), &sub);
  MPI_Group_free(&parent);
  mpi::check(rc, "MPI_Group_incl", group(), world_rank());
  MPI_Comm child = MPI_COMM_NULL;
  const int rc2 = MPI_Comm_create_group(comm_, sub, tag, &child);
  MPI_Group_free(&sub);
  mpi::check(rc2, "MPI_Comm_create_group", group(), world_rank());
  if (child == MPI_COMM_NULL) return nullptr;
  MPI_Comm_set_errhandler(child, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(child, name, world_rank(), shared_recorder(), options()));
}

}  // namespace fl::comm
