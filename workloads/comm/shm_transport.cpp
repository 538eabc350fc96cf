#include "workloads/comm/shm_transport.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "workloads/comm/errors.hpp"
#include "workloads/comm/mpi_detail.hpp"

namespace fl::comm {

namespace {

constexpr size_t kPage = 4096;

// What the SIGBUS handler reports: the mapping being written and the op, prepared before the
// copy (the handler only calls write()).
struct BusContext {
  const char* base = nullptr;
  size_t bytes = 0;
  char msg[1024] = {0};
  size_t len = 0;
};
BusContext g_bus;
struct sigaction g_prev_bus {};
std::once_flag g_handler_once;

void on_bus(int sig, siginfo_t* info, void* uctx) {
  const char* addr = static_cast<const char*>(info->si_addr);
  if (g_bus.base != nullptr && addr >= g_bus.base && addr < g_bus.base + g_bus.bytes) {
    ssize_t ignored = ::write(STDERR_FILENO, g_bus.msg, g_bus.len);
    (void)ignored;
    // Die of the signal itself (a crash, exit -7 to a launcher): the default action on return.
    ::signal(SIGBUS, SIG_DFL);
    return;
  }
  if ((g_prev_bus.sa_flags & SA_SIGINFO) != 0 && g_prev_bus.sa_sigaction != nullptr) {
    g_prev_bus.sa_sigaction(sig, info, uctx);
  } else if (g_prev_bus.sa_handler != SIG_DFL && g_prev_bus.sa_handler != SIG_IGN &&
             g_prev_bus.sa_handler != nullptr) {
    g_prev_bus.sa_handler(sig);
  } else {
    ::signal(SIGBUS, SIG_DFL);
  }
}

void install_bus_handler() {
  std::call_once(g_handler_once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

void bus_context(const char* base, size_t bytes, const std::string& text) {
  g_bus.base = base;
  g_bus.bytes = bytes;
  const size_t n = std::min(text.size(), sizeof(g_bus.msg) - 1);
  std::memcpy(g_bus.msg, text.data(), n);
  g_bus.msg[n] = '\0';
  g_bus.len = n;
}

// Whether every member of `comm` runs on this node: host names compared, as NCCL compares host
// hashes (MPI's own locality query does not know about singletons joined by connect/accept).
// Collective.
bool all_members_on_this_node(MPI_Comm comm, int size, const std::string& group, int world_rank) {
  constexpr int kHost = 256;
  std::vector<char> hosts(static_cast<size_t>(kHost) * static_cast<size_t>(size), '\0');
  // The host and the simulated node (NODE_RANK): simulated nodes share a host but not memory.
  char mine[kHost] = {0};
  ::gethostname(mine, kHost / 2);
  if (const char* node = std::getenv("NODE_RANK")) {
    std::snprintf(mine + std::strlen(mine), kHost / 2 - 1, "/node%s", node);
  }
  mpi::check(MPI_Allgather(mine, kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, comm),
             "MPI_Allgather(shm hosts)", group, world_rank);
  int all_local = 1;
  for (int r = 0; r < size; ++r) {
    if (std::strncmp(hosts.data() + static_cast<size_t>(r) * kHost, mine, kHost) != 0) {
      all_local = 0;
    }
  }
  return all_local != 0;
}

// The members' segment names, one set per communicator instance (member 0 draws it). Collective.
std::vector<std::string> segment_names(MPI_Comm comm, int rank, int size, const std::string& group,
                                       int world_rank) {
  uint64_t nonce = 0;
  if (rank == 0) nonce = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  mpi::check(MPI_Bcast(&nonce, 1, MPI_UINT64_T, 0, comm), "MPI_Bcast(shm name)", group, world_rank);
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r)
    names.push_back(fmt::format("/faultline-shm-{:016x}-{}", nonce, r));
  return names;
}

// Creates this member's segment `name` of `bytes` and maps it into `*seg`; the failure, or
// empty. Sparse unless `reserve`: then every page is backed now (posix_fallocate), and a
// filesystem that cannot hold the segment refuses it here, as NCCL's set-up fails.
std::string create_segment(const std::string& name, size_t bytes, bool reserve, char** seg) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  std::string failure;
  if (fd < 0) {
    failure = fmt::format("shm_open({}) failed: {}", name, std::strerror(errno));
  } else if (reserve) {
    // posix_fallocate returns the error number instead of setting errno; a signal while it
    // backs pages is no failure (NCCL retries on EINTR too).
    int err = 0;
    do {
      err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    } while (err == EINTR);
    if (err != 0) {
      failure = fmt::format(
          "cannot create shared memory segment /dev/shm{} (size {}): posix_fallocate failed: {} "
          "(/dev/shm cannot hold the transport's segments: give the job a larger /dev/shm)",
          name, bytes, std::strerror(err));
    }
  } else if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    // Sparse: a tmpfs accepts a size it cannot back; the pages are charged when touched.
    failure = fmt::format("ftruncate({}, {}) failed: {}", name, bytes, std::strerror(errno));
  }
  if (failure.empty()) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      failure = fmt::format("mmap of {} failed: {}", name, std::strerror(errno));
    } else {
      *seg = static_cast<char*>(p);
    }
  }
  if (fd >= 0) ::close(fd);
  return failure;
}

// Maps every peer's segment into `segs`; the first failure, or empty.
std::string map_peer_segments(const std::vector<std::string>& names, int rank, size_t bytes,
                              bool acs, std::vector<char*>& segs) {
  // Under ACS a peer's memory is reachable for reads but a write into it never arrives there:
  // a private mapping gives exactly that (its pages are the peer's until this rank writes one).
  const int share = acs ? MAP_PRIVATE : MAP_SHARED;
  for (int r = 0; r < static_cast<int>(names.size()); ++r) {
    if (r == rank) continue;
    const std::string& name = names[static_cast<size_t>(r)];
    int pfd = ::shm_open(name.c_str(), O_RDWR, 0600);
    void* p = pfd < 0 ? MAP_FAILED : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, share, pfd, 0);
    if (pfd >= 0) ::close(pfd);
    if (p == MAP_FAILED) {
      return fmt::format("cannot map peer {}'s segment {}: {}", r, name, std::strerror(errno));
    }
    segs[static_cast<size_t>(r)] = static_cast<char*>(p);
  }
  return "";
}

// Whether every member succeeded (`ok` here): an all-reduce of the flags. Collective.
bool all_succeeded(bool ok, MPI_Comm comm, const char* what, const std::string& group,
                   int world_rank) {
  int flag = ok ? 1 : 0;
  mpi::check(MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MIN, comm), what, group,
             world_rank);
  return flag != 0;
}

}  // namespace

class ShmAllReduce final : public PendingOp {
 public:
  ShmAllReduce(ShmTransport& t, void* data, size_t count, DType dt, ReduceOp op,
               std::string describe, std::function<void()> finish)
      : t_(t),
        data_(static_cast<char*>(data)),
        elem_(dtype_size(dt)),
        total_(count * dtype_size(dt)),
        dt_(dt),
        op_(op),
        describe_(std::move(describe)),
        finish_(std::move(finish)) {
    // A chunk is whole elements and at most the FIFO.
    chunk_max_ = t_.data_bytes_ / elem_ * elem_;
  }
  bool test() override {
    for (;;) {
      if (state_ == State::kCopy) {
        if (done_ >= total_) {
          if (finish_) finish_();
          finish_ = nullptr;
          return true;
        }
        chunk_ = std::min(total_ - done_, chunk_max_);
        if (t_.head_ + chunk_ > t_.data_bytes_) t_.head_ = 0;  // the FIFO wraps
        char* mine = t_.segs_[static_cast<size_t>(t_.rank_)];
        bus_context(mine, t_.bytes_,
                    fmt::format("faultline worker error (comm): bus error (SIGBUS) in {} on group "
                                "'{}': the shared-memory transport wrote bytes {}-{} of its "
                                "{}-byte segment /dev/shm{} and the filesystem behind /dev/shm "
                                "could not back the page (/dev/shm is too small for the "
                                "transport's segments: give the job a larger /dev/shm, e.g. "
                                "docker --shm-size, or set NCCL_SHM_DISABLE=1)\n",
                                describe_, t_.group_, t_.head_, t_.head_ + chunk_, t_.bytes_,
                                t_.names_[static_cast<size_t>(t_.rank_)]));
        std::memcpy(mine + t_.head_, data_ + done_, chunk_);  // the lazy touch
        bus_context(nullptr, 0, "");
        ++t_.seq_;
        if (t_.p2p_) {
          post_flags();
        } else {
          mpi::check(MPI_Ibarrier(t_.comm_, &req_), "MPI_Ibarrier(shm posted)", t_.group_,
                     t_.world_rank_);
        }
        state_ = State::kPosted;
      }
      if (state_ == State::kPosted) {
        if (t_.p2p_ ? !flags_arrived() : !request_done()) return false;
        // Every member's chunk is in place: reduce them in rank order.
        char* out = data_ + done_;
        const size_t n = chunk_ / elem_;
        std::memcpy(out, t_.segs_[0] + t_.head_, chunk_);
        for (int r = 1; r < t_.size_; ++r) {
          mpi::accumulate_any(out, t_.segs_[static_cast<size_t>(r)] + t_.head_, n, dt_, op_);
        }
        mpi::check(MPI_Ibarrier(t_.comm_, &req_), "MPI_Ibarrier(shm read)", t_.group_,
                   t_.world_rank_);
        state_ = State::kRead;
        continue;
      }
      if (!request_done()) return false;
      // Everyone has read this chunk: its FIFO space may be written again.
      t_.head_ += (chunk_ + kPage - 1) / kPage * kPage;
      done_ += chunk_;
      state_ = State::kCopy;
    }
  }

 private:
  enum class State { kCopy, kPosted, kRead };
  // The P2P ready flag: member `from`'s slot in the flags page of `seg`.
  uint64_t* flag(char* seg, int from) const {
    return reinterpret_cast<uint64_t*>(seg + t_.data_bytes_) + from;
  }
  // This chunk's sequence number, written into every peer's segment (a direct peer write).
  void post_flags() {
    for (int r = 0; r < t_.size_; ++r) {
      if (r == t_.rank_) continue;
      __atomic_store_n(flag(t_.segs_[static_cast<size_t>(r)], t_.rank_), t_.seq_, __ATOMIC_RELEASE);
    }
  }
  // Whether every peer's flag for this chunk has reached this rank's segment.
  bool flags_arrived() const {
    char* mine = t_.segs_[static_cast<size_t>(t_.rank_)];
    for (int r = 0; r < t_.size_; ++r) {
      if (r != t_.rank_ && __atomic_load_n(flag(mine, r), __ATOMIC_ACQUIRE) < t_.seq_) {
        return false;
      }
    }
    return true;
  }
  bool request_done() {
    int flag = 0;
    mpi::check(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE), "MPI_Test(shm)", t_.group_,
               t_.world_rank_);
    return flag != 0;
  }
  ShmTransport& t_;
  char* data_;
  size_t elem_, total_;
  DType dt_;
  ReduceOp op_;
  std::string describe_;
  std::function<void()> finish_;
  size_t chunk_max_ = 0, chunk_ = 0, done_ = 0;
  State state_ = State::kCopy;
  MPI_Request req_ = MPI_REQUEST_NULL;
};

std::unique_ptr<ShmTransport> ShmTransport::create(MPI_Comm comm, int rank, int size,
                                                   const std::string& group, int world_rank) {
  if (!kShmTransport.get() || size < 2) return nullptr;
  if (const char* off = std::getenv("NCCL_SHM_DISABLE"); off != nullptr && std::atoi(off) != 0) {
    return nullptr;
  }
  if (!all_members_on_this_node(comm, size, group, world_rank)) return nullptr;

  std::unique_ptr<ShmTransport> t(new ShmTransport());
  t->comm_ = comm;
  t->rank_ = rank;
  t->size_ = size;
  t->group_ = group;
  t->world_rank_ = world_rank;
  const int64_t want = kShmBufferBytes.get();
  if (want < static_cast<int64_t>(kPage)) {
    raise<CommError>("FAULTLINE_SHM_BUFFER_BYTES={} is below one page (allowed: 4096 or more)",
                     want);
  }
  t->bytes_ = static_cast<size_t>(want) / kPage * kPage;
  const char* p2p_off = std::getenv("NCCL_P2P_DISABLE");
  t->p2p_ = kShmP2p.get() && !(p2p_off != nullptr && std::atoi(p2p_off) != 0);
  if (t->p2p_ && (t->bytes_ < 2 * kPage || static_cast<size_t>(size) * 8 > kPage)) {
    raise<CommError>(
        "FAULTLINE_SHM_P2P needs a segment of two pages or more and at most {} members on a node "
        "(FAULTLINE_SHM_BUFFER_BYTES={}, {} members)",
        kPage / 8, want, size);
  }
  t->data_bytes_ = t->p2p_ ? t->bytes_ - kPage : t->bytes_;
  const std::string allocate = kShmAllocate.get();
  if (allocate != "sparse" && allocate != "reserve") {
    raise<SettingError>("FAULTLINE_SHM_ALLOCATE='{}' is not allowed (allowed: sparse, reserve)",
                        allocate);
  }
  t->names_ = segment_names(comm, rank, size, group, world_rank);
  install_bus_handler();
  const std::string& own = t->names_[static_cast<size_t>(rank)];
  t->segs_.assign(static_cast<size_t>(size), nullptr);
  std::string failure =
      create_segment(own, t->bytes_, allocate == "reserve", &t->segs_[static_cast<size_t>(rank)]);
  if (all_succeeded(failure.empty(), comm, "MPI_Allreduce(shm create)", group, world_rank)) {
    failure = map_peer_segments(t->names_, rank, t->bytes_, kPcieAcs.get(), t->segs_);
  }
  const bool mapped =
      all_succeeded(failure.empty(), comm, "MPI_Allreduce(shm map)", group, world_rank);
  ::shm_unlink(own.c_str());  // mapped by everyone (or given up): the name is not needed
  if (!mapped) {
    raise<CommError>(
        "shared-memory transport on group '{}': {} (set NCCL_SHM_DISABLE=1 to use the network "
        "path)",
        group, failure.empty() ? "a peer could not create or map its segment" : failure);
  }
  return t;
}

ShmTransport::~ShmTransport() {
  for (char* p : segs_) {
    if (p != nullptr) ::munmap(p, bytes_);
  }
}

std::unique_ptr<PendingOp> ShmTransport::all_reduce(void* data, size_t count, DType t, ReduceOp op,
                                                    std::string describe,
                                                    std::function<void()> on_finish) {
  return std::make_unique<ShmAllReduce>(*this, data, count, t, op, std::move(describe),
                                        std::move(on_finish));
}

}  // namespace fl::comm
