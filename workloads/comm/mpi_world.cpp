// The MPI backend's world: MPI's start and end in a process, and the world communicator — whole
// from MPI_Init (mpirun, or the harness's PMIx server: the local launcher's direct launch), or
// joined by ranks started one by one (MPI singletons).
#include <sys/prctl.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "base/settings.hpp"

#include "workloads/comm/mpi_communicator.hpp"
#include "workloads/comm/mpi_detail.hpp"
#include "workloads/comm/singleton_join.hpp"

namespace fl::comm {

void mpi_init_once() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A timed-out op is still pending somewhere: MPI_Finalize would wait for it forever.
    if (!finalized && !mpi::g_dirty.load()) MPI_Finalize();
  });
}

void mpi_abort_if_running(int code) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

int mpi_world_size() {
  mpi_init_once();
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int mpi_world_rank() {
  mpi_init_once();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

namespace {

FAULTLINE_SETTING(kMpiStartSlackUs, int64_t, "FAULTLINE_MPI_START_SLACK_US", 5000,
                  "Timer slack (microseconds) of the rank's main thread while it joins the MPI "
                  "world; 0 leaves it as it is");

// While MPI_Init waits for the other ranks it polls: Open MPI 4.1 sleeps 100 us between polls
// (OMPI_LAZY_WAIT_FOR_COMPLETION). With 64 ranks per core those wake-ups take the CPU that the
// ranks still starting need. A coarser timer slack lets the kernel batch them; the old slack is
// back once the world exists, and only the threads MPI starts meanwhile keep the coarse one
// (their timers may fire up to that much late).
class StartSlack {
 public:
  StartSlack() {
    const int64_t us = kMpiStartSlackUs.get();
    if (us < 0 || us > 1000000) {
      raise<SettingError>("FAULTLINE_MPI_START_SLACK_US={} is out of range (allowed 0-1000000)",
                          us);
    }
    if (us == 0) return;
    const int old = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (old <= 0) return;
    if (::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(us) * 1000UL, 0, 0, 0) == 0) {
      old_ns_ = old;
    }
  }
  ~StartSlack() {
    if (old_ns_ > 0) ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(old_ns_), 0, 0, 0);
  }
  StartSlack(const StartSlack&) = delete;
  StartSlack& operator=(const StartSlack&) = delete;

 private:
  int old_ns_ = 0;
};

// Ranks started one by one (the harness's local launcher: no mpirun) are MPI singletons. They
// join into one communicator through MPI's connect/accept in log2(world) rounds
// (singleton_join.hpp). Singletons need an ompi-server to find each other
// (OMPI_MCA_pmix_server_uri); the local launcher runs one. An earlier join took one newcomer at
// a time (N-1 rounds, each an accept over the whole group so far): 32 ranks never got ready in
// 300 s on a 2-core machine, so it is gone.
//
// Before any rank enters a blocking MPI call of a round, every rank of both blocks sees in the
// store that its partner is there (the port, or the connector's mark), within the join's
// deadline: a partner that never comes is an error naming it, never a rank stuck in MPI.
MPI_Comm join_round(MPI_Comm comm, int rank, const TreeJoinRound& round, rdzv::StoreClient& store,
                    const JoinDeadline& deadline) {
  std::string port(MPI_MAX_PORT_NAME, '\0');
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
  if (round.accepting) {
    if (round.leader) {
      mpi::check(MPI_Open_port(MPI_INFO_NULL, port.data()), "MPI_Open_port", "world", rank);
      port.resize(std::strlen(port.c_str()));
      store.set(round.port_key(), port);
    }
    wait_for_partner(store, round.connecting_key(), rank, round, deadline);
    mpi::check(MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, comm, &inter), "MPI_Comm_accept",
               "world", rank);
    if (round.leader) MPI_Close_port(port.c_str());
  } else {
    port = wait_for_partner(store, round.port_key(), rank, round, deadline);
    if (round.leader) store.set(round.connecting_key(), "1");
    mpi::check(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, comm, &inter), "MPI_Comm_connect",
               "world", rank);
  }
  // The accepting block merges low: the communicator stays in rank order.
  mpi::check(MPI_Intercomm_merge(inter, round.accepting ? 0 : 1, &merged), "MPI_Intercomm_merge",
             "world", rank);
  MPI_Comm_free(&inter);
  MPI_Comm_free(&comm);
  return merged;
}

MPI_Comm join_singletons(int rank, int world_size, rdzv::StoreClient& store,
                         const JoinDeadline& deadline) {
  if (std::getenv("OMPI_MCA_pmix_server_uri") == nullptr) {
    raise<CommError>(
        "[rank {}] this rank was started without mpirun (MPI world size 1, WORLD_SIZE={}): the "
        "MPI backend then joins ranks through an ompi-server, but OMPI_MCA_pmix_server_uri is "
        "not set (the harness's local launcher sets it; or start the ranks with mpirun)",
        rank, world_size);
  }
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Comm comm = MPI_COMM_NULL;
  mpi::check(MPI_Comm_dup(MPI_COMM_SELF, &comm), "MPI_Comm_dup", "world", rank);
  for (const auto& round : tree_join_rounds(rank, world_size)) {
    comm = join_round(comm, rank, round, store, deadline);
  }
  return comm;
}

}  // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::create_world(
    int rank, int world_size, CommOptions options, rdzv::StoreClient* store,
    std::chrono::milliseconds join_timeout) {
  const JoinDeadline deadline(join_timeout);  // from before MPI_Init: a singleton's is slow
  StartSlack slack;                           // until the world exists
  mpi_init_once();
  int mpi_size = mpi_world_size();
  MPI_Comm base = MPI_COMM_WORLD;
  const bool singleton =
      mpi_size == 1 && world_size > 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
  if (singleton && store == nullptr) {
    raise<CommError>(
        "[rank {}] MPI started 1 process but the world size is {}, and there is no "
        "rendezvous store to join singleton ranks through",
        rank, world_size);
  }
  if (singleton) {
    if (rank < 0 || rank >= world_size) {
      raise<CommError>("[rank {}] rank is out of range for world size {} (allowed 0-{})", rank,
                       world_size, world_size - 1);
    }
    base = join_singletons(rank, world_size, *store, deadline);  // (raises its errors)
  } else if (mpi_size != world_size) {
    raise<CommError>(
        "[rank {}] MPI started {} processes but the world size is {}: the launcher's "
        "process count and WORLD_SIZE disagree",
        rank, mpi_size, world_size);
  }
  if (rank < 0 || rank >= world_size) {
    raise<CommError>("[rank {}] rank is out of range for world size {} (allowed 0-{})", rank,
                     world_size, world_size - 1);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  mpi::check(MPI_Comm_split(base, 0, rank, &comm), "MPI_Comm_split", "world", rank);
  if (base != MPI_COMM_WORLD) MPI_Comm_free(&base);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int got = -1;
  MPI_Comm_rank(comm, &got);
  if (got != rank) {
    raise<CommError>("[rank {}] two processes claim rank {} (MPI placed this one at {})", rank,
                     rank, got);
  }
  auto recorder = std::make_shared<FlightRecorder>(static_cast<size_t>(kFlightRecorderSize.get()));
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(comm, "world", rank, std::move(recorder), std::move(options)));
}

}  // namespace fl::comm
