// The harness as the PMIx server of an MPI world it starts itself (direct launch, as
// `srun --mpi=pmix` does): one namespace with every rank of the incarnation, registered before
// the ranks are forked, so that each rank's MPI_Init finds the whole MPI_COMM_WORLD through the
// harness rather than forking an `orted` of its own (an MPI singleton's start). The only file
// that includes PMIx's headers; the local launcher uses it through this interface.
//
// One machine: a fence hands the ranks' own data back, there is no remote data to fetch. The
// server's callbacks run on PMIx's progress thread and never wait; every wait of the harness on
// the server has a deadline. A rank that dies is seen by the harness as a process exit, as
// before; the server forgets it with its namespace.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace fl::harness {

class PmixServer {
 public:
  // The server of this process, started on first use with its files under `tmpdir` (it writes
  // none there itself: the jobs' data stays in its memory, PMIX_MCA_gds=hash) and never stopped
  // before the process ends: PMIx 4.2 cannot start a server again in a process that stopped one.
  // PMIx's clients reach it over TCP on loopback, the address in their environment (ranks in
  // network namespaces through a relay in the run's hub: netns_relay.hpp). Throws
  // Error naming PMIx's status when it cannot start.
  static PmixServer& in_process(const std::string& tmpdir);

  // Registers the job `nspace` of `ranks` ranks, all on this machine, and each rank as a client
  // of it. Throws Error when PMIx refuses or does not answer within `deadline`. (No PMIX_TMPDIR:
  // Open MPI takes that for its own session directory and removes it when a rank ends.)
  void register_job(const std::string& nspace, int ranks,
                    std::chrono::milliseconds deadline = std::chrono::seconds(30));
  // Forgets the job (its processes should be gone); nothing when there is no such job.
  void deregister_job(const std::string& nspace,
                      std::chrono::milliseconds deadline = std::chrono::seconds(10));
  // The variables rank `rank` of job `nspace` connects with (PMIX_NAMESPACE, PMIX_RANK, the
  // server's URI and modules). Throws Error when there is no such rank.
  std::map<std::string, std::string> rank_env(const std::string& nspace, int rank) const;

  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

 private:
  explicit PmixServer(const std::string& tmpdir);

  mutable std::mutex mu_;
  std::map<std::string, int> jobs_;  // namespace -> ranks
};

}  // namespace fl::harness
