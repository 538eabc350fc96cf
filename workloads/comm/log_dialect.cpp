#include "workloads/comm/log_dialect.hpp"

#include <sys/syscall.h>
#include <unistd.h>

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
                                      "UNKNOWN"};
  return op_kind >= 0 && op_kind < 8 ? names[op_kind] : "UNKNOWN";
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

}  // namespace

std::vector<std::string> pytorch_lines(const std::exception& e, std::string_view kind, int rank) {
  const std::string msg = e.what();
  if (rank < 0) rank = 0;  // a process that never learned its rank (single-process runs)
  const int dev = rank;
  std::vector<std::string> out;
  if (auto* t = dynamic_cast<const CommTimeoutError*>(&e); t && t->info().seq >= 0) {
    const TimeoutInfo& i = t->info();
    out.push_back(watchdog_timeout_line(rank, i));
    out.push_back(fmt::format(
        "[rank{0}]:[E ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {0}] "
        "Exception (either an error or timeout) detected by watchdog at work: {1}, last enqueued "
        "NCCL work: {1}, last completed NCCL work: {2}.",
        rank, i.seq, i.seq - 1));
    return out;
  }
  if (auto* o = dynamic_cast<const OutOfMemoryError*>(&e)) {
    if (msg.find("out of memory on host") != std::string::npos) {
      // PyTorch's CPU allocator (c10/core/impl/alloc_cpu.cpp).
      out.push_back(fmt::format(
          "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not "
          "enough memory: you tried to allocate {} bytes.",
          o->requested()));
      return out;
    }
    const size_t total = o->budget() ? o->budget() : o->allocated() + o->requested();
    const size_t free_bytes = total > o->allocated() ? total - o->allocated() : 0;
    out.push_back(
        cuda_oom_line(0, o->requested(), total, free_bytes, o->allocated(), o->allocated(), 0));
    return out;
  }
  std::string host, port;
  if (kind == "store" && msg.find("cannot listen on") != std::string::npos &&
      host_port(msg, host, port)) {
    out.push_back(fmt::format(
        "RuntimeError: The server socket has failed to listen on any local network address. The "
        "server socket has failed to bind to [::]:{0} (errno: 98 - Address already in use). The "
        "server socket has failed to bind to 0.0.0.0:{0} (errno: 98 - Address already in use).",
        port));
    return out;
  }
  if (kind == "store" && msg.find("cannot reach the rendezvous store") != std::string::npos &&
      host_port(msg, host, port)) {
    if (msg.find("ECONNREFUSED") != std::string::npos) {
      out.push_back(nccl_warn_line(
          dev, "misc/socket.cc:484",
          fmt::format("socketPollConnect: Connect to {}<{}> returned 111(Connection refused) "
                      "errno 115(Operation now in progress)",
                      host, port)));
    }
    static const std::regex ms(R"(([0-9]+) ms)");
    std::smatch m;
    const std::string waited = std::regex_search(msg, m, ms) ? m[1].str() : "0";
    out.push_back(fmt::format(
        "torch.distributed.DistNetworkError: The client socket has timed out after {}ms while "
        "trying to connect to ({}, {}).",
        waited, host, port));
    return out;
  }
  static const std::regex rdzv(
      R"(rendezvous timed out after ([0-9]+) ms .*: ([0-9]+) of ([0-9]+) ranks arrived)");
  std::smatch r;
  if (kind == "rendezvous" && std::regex_search(msg, r, rdzv)) {
    // c10d's TCPStore server when clients do not join (PyTorch >= 2.2).
    out.push_back(fmt::format(
        "torch.distributed.DistStoreError: Timed out after {} seconds waiting for clients. {}/{} "
        "clients joined.",
        std::stoll(r[1]) / 1000 + 1, r[2].str(), r[3].str()));
    return out;
  }
  if (kind == "loss scale") {
    out.push_back(
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run.");
    return out;
  }
  static const std::regex build(R"(building kernel plugin '([^']+)' failed)");
  static const std::regex shape(
      R"(size mismatch for ([A-Za-z0-9_.]+): \[([0-9 x]+)\] in the checkpoint, \[([0-9 x]+)\] in this model)");
  std::smatch m;
  if (kind == "plugin" && std::regex_search(msg, m, build)) {
    out.push_back(fmt::format("RuntimeError: Error building extension '{}'", m[1].str()));
    return out;
  }
  if (std::regex_search(msg, m, shape)) {
    out.push_back("RuntimeError: Error(s) in loading state_dict for GPT2Model:");
    out.push_back(fmt::format(
        "\tsize mismatch for {}: copying a param with shape torch.Size([{}]) from checkpoint, "
        "the shape in current model is torch.Size([{}]).",
        m[1].str(), dims_to_torch(m[2]), dims_to_torch(m[3])));
    return out;
  }
  return out;
}

}  // namespace fl::comm
