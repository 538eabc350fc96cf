#include "workloads/comm/log_dialect.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <optional>
#include <regex>

#include <fmt/format.h>

#include "base/error.hpp"
#include "kernels/memory.hpp"
#include "workloads/comm/errors.hpp"
#include "workloads/comm/flight_recorder.hpp"

namespace fl::comm {

bool pytorch_dialect() {
  const std::string v = kLogFidelity.get();
  if (v == "pytorch") return true;
  if (v == "faultline" || v.empty()) return false;
  raise<SettingError>(
      "FAULTLINE_LOG_FIDELITY: '{}' is not a log fidelity (allowed: faultline, pytorch)", v);
}

const char* pytorch_op_type(int op_kind) {
  // The names ProcessGroupNCCL's WorkNCCL prints (c10d OpType).
  static const char* const names[] = {"ALLREDUCE",
                                      "_REDUCE_SCATTER_BASE",
                                      "_ALLGATHER_BASE",
                                      "BROADCAST",
                                      "SEND",
                                      "RECV",
                                      "BARRIER",
                                      "UNKNOWN",
                                      "ALLTOALL_BASE"};
  return op_kind >= 0 && op_kind < 9 ? names[op_kind] : "UNKNOWN";
}

TimeoutInfo timeout_info(const FlightEntry& d, int world, int64_t elapsed_ms, int64_t timeout_ms) {
  TimeoutInfo t;
  t.seq = d.seq;
  t.op_type = pytorch_op_type(static_cast<int>(d.op));
  t.numel_in = d.count;
  t.numel_out = d.count;
  const size_t w = static_cast<size_t>(world > 0 ? world : 1);
  if (d.op == OpKind::kAllGather) t.numel_out = d.count * w;
  if (d.op == OpKind::kReduceScatter) t.numel_out = d.count / w;
  t.timeout_ms = timeout_ms;
  t.elapsed_ms = elapsed_ms;
  return t;
}

std::string watchdog_timeout_line(int rank, const TimeoutInfo& t) {
  return fmt::format(
      "[rank{0}]:[E ProcessGroupNCCL.cpp:616] [Rank {0}] Watchdog caught collective operation "
      "timeout: WorkNCCL(SeqNum={1}, OpType={2}, NumelIn={3}, NumelOut={4}, Timeout(ms)={5}) ran "
      "for {6} milliseconds before timing out.",
      rank, t.seq, t.op_type, t.numel_in, t.numel_out, t.timeout_ms, t.elapsed_ms);
}

std::string torch_bytes(size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", b / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", b / (1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.2f} KiB", b / (1ull << 10));
  return fmt::format("{} bytes", bytes);
}

std::string cuda_oom_line(int device, size_t requested, size_t total, size_t free_bytes,
                          size_t in_use, size_t allocated, size_t reserved_unallocated) {
  return fmt::format(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {}. GPU {} has a total "
      "capacity of {} of which {} is free. Including non-PyTorch memory, this process has {} "
      "memory in use. Of the allocated memory {} is allocated by PyTorch, and {} is reserved by "
      "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
      "documentation for Memory Management  "
      "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
      torch_bytes(requested), device, torch_bytes(total), torch_bytes(free_bytes),
      torch_bytes(in_use), torch_bytes(allocated), torch_bytes(reserved_unallocated));
}

std::string nccl_warn_line(int device, std::string_view where, std::string_view message) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("{}:{}:{} [{}] {} NCCL WARN {}", host, ::getpid(),
                     static_cast<long>(::syscall(SYS_gettid)), device, where, message);
}

namespace {

// "HOST:PORT" of the first "at HOST:PORT" / "on HOST:PORT" in a faultline message.
bool host_port(const std::string& msg, std::string& host, std::string& port) {
  static const std::regex re(R"((?:at|on) \[?([A-Za-z0-9_.:-]*?)\]?:([0-9]+))");
  std::smatch m;
  if (!std::regex_search(msg, m, re)) return false;
  host = m[1];
  port = m[2];
  return true;
}

std::string dims_to_torch(std::string dims) {  // "96 x 32" -> "96, 32"
  return std::regex_replace(dims, std::regex(" x "), ", ");
}

// The failure being translated: the exception, its message, the kind of error it was reported as
// (store, rendezvous, ...) and the rank (also the device a rank drives).
struct Failure {
  const std::exception& e;
  const std::string& msg;
  std::string_view kind;
  int rank;
};
using Lines = std::vector<std::string>;

// Each translator returns the lines PyTorch prints for the failures it knows, nullopt for others.
std::optional<Lines> watchdog_timeout(const Failure& f) {
  auto* t = dynamic_cast<const CommTimeoutError*>(&f.e);
  if (t == nullptr || t->info().seq < 0) return std::nullopt;
  const TimeoutInfo& i = t->info();
  return Lines{watchdog_timeout_line(f.rank, i),
               fmt::format("[rank{0}]:[E ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) "
                           "Rank {0}] Exception (either an error or timeout) detected by watchdog "
                           "at work: {1}, last enqueued NCCL work: {1}, last completed NCCL work: "
                           "{2}.",
                           f.rank, i.seq, i.seq - 1)};
}

std::optional<Lines> out_of_memory(const Failure& f) {
  auto* o = dynamic_cast<const OutOfMemoryError*>(&f.e);
  if (o == nullptr) return std::nullopt;
  if (f.msg.find("out of memory on host") != std::string::npos) {
    // PyTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp).
    return Lines{fmt::format(
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not "
        "enough memory: you tried to allocate {} bytes.",
        o->requested())};
  }
  const size_t total = o->budget() ? o->budget() : o->allocated() + o->requested();
  const size_t free_bytes = total > o->allocated() ? total - o->allocated() : 0;
  return Lines{
      cuda_oom_line(0, o->requested(), total, free_bytes, o->allocated(), o->allocated(), 0)};
}

std::optional<Lines> store_cannot_listen(const Failure& f) {
  std::string host, port;
  if (f.kind != "store" || f.msg.find("cannot listen on") == std::string::npos ||
      !host_port(f.msg, host, port)) {
    return std::nullopt;
  }
  return Lines{fmt::format(
      "RuntimeError: The server socket has failed to listen on any local network address. The "
      "server socket has failed to bind to [::]:{0} (errno: 98 - Address already in use). The "
      "server socket has failed to bind to 0.0.0.0:{0} (errno: 98 - Address already in use).",
      port)};
}

std::optional<Lines> store_unreachable(const Failure& f) {
  std::string host, port;
  if (f.kind != "store" || f.msg.find("cannot reach the rendezvous store") == std::string::npos ||
      !host_port(f.msg, host, port)) {
    return std::nullopt;
  }
  Lines out;
  if (f.msg.find("ECONNREFUSED") != std::string::npos) {
    out.push_back(nccl_warn_line(
        f.rank, "misc/socket.cc:484",
        fmt::format("socketPollConnect: Connect to {}<{}> returned 111(Connection refused) "
                    "errno 115(Operation now in progress)",
                    host, port)));
  }
  static const std::regex ms(R"(([0-9]+) ms)");
  std::smatch m;
  const std::string waited = std::regex_search(f.msg, m, ms) ? m[1].str() : "0";
  out.push_back(fmt::format(
      "torch.distributed.DistNetworkError: The client socket has timed out after {}ms while "
      "trying to connect to ({}, {}).",
      waited, host, port));
  return out;
}

std::optional<Lines> rendezvous_timeout(const Failure& f) {
  static const std::regex rdzv(
      R"(rendezvous timed out after ([0-9]+) ms .*: ([0-9]+) of ([0-9]+) ranks arrived)");
  std::smatch r;
  if (f.kind != "rendezvous" || !std::regex_search(f.msg, r, rdzv)) return std::nullopt;
  // c10d's TCPStore server when clients do not join (PyTorch >= 2.2).
  return Lines{fmt::format(
      "torch.distributed.DistStoreError: Timed out after {} seconds waiting for clients. {}/{} "
      "clients joined.",
      std::stoll(r[1]) / 1000 + 1, r[2].str(), r[3].str())};
}

std::optional<Lines> loss_scale_at_minimum(const Failure& f) {
  if (f.kind != "loss scale") return std::nullopt;
  return Lines{
      "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
      "Exiting run."};
}

std::optional<Lines> plugin_build_failed(const Failure& f) {
  static const std::regex build(R"(building kernel plugin '([^']+)' failed)");
  std::smatch m;
  if (f.kind != "plugin" || !std::regex_search(f.msg, m, build)) return std::nullopt;
  return Lines{fmt::format("RuntimeError: Error building extension '{}'", m[1].str())};
}

std::optional<Lines> state_dict_size_mismatch(const Failure& f) {
  static const std::regex shape(
      R"(size mismatch for ([A-Za-z0-9_.]+): \[([0-9 x]+)\] in the checkpoint, \[([0-9 x]+)\] in this model)");
  std::smatch m;
  if (!std::regex_search(f.msg, m, shape)) return std::nullopt;
  return Lines{"RuntimeError: Error(s) in loading state_dict for GPT2Model:",
               fmt::format("\tsize mismatch for {}: copying a param with shape torch.Size([{}]) "
                           "from checkpoint, the shape in current model is torch.Size([{}]).",
                           m[1].str(), dims_to_torch(m[2]), dims_to_torch(m[3]))};
}

// NCCL's shared-memory set-up on a /dev/shm that cannot hold the segment: ncclSystemError, and
// PyTorch's DistBackendError carries NCCL's last warning (PyTorch 2.x with NCCL 2.21).
std::optional<Lines> shm_segment_not_created(const Failure& f) {
  static const std::regex seg(R"(cannot create shared memory segment (\S+) \(size ([0-9]+)\))");
  std::smatch m;
  if (f.kind != "comm" || !std::regex_search(f.msg, m, seg)) return std::nullopt;
  return Lines{
      "torch.distributed.DistBackendError: NCCL error in: "
      "../torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error (run with "
      "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
      "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
      "device error. ",
      "Last error:",
      fmt::format("Error while creating shared memory segment {} (size {})", m[1].str(),
                  m[2].str())};
}

// In the order they are tried: the first that knows the failure gives the lines.
constexpr std::optional<Lines> (*kTranslators[])(const Failure&) = {
    watchdog_timeout,        out_of_memory,         store_cannot_listen, store_unreachable,
    rendezvous_timeout,      loss_scale_at_minimum, plugin_build_failed, state_dict_size_mismatch,
    shm_segment_not_created,
};

}  // namespace

std::vector<std::string> pytorch_lines(const std::exception& e, std::string_view kind, int rank) {
  const std::string msg = e.what();
  if (rank < 0) rank = 0;  // a process that never learned its rank (single-process runs)
  const Failure f{e, msg, kind, rank};
  for (auto* translate : kTranslators) {
    if (auto lines = translate(f)) return std::move(*lines);
  }
  return {};
}

}  // namespace fl::comm
