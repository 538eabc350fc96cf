// The harness's PMIx server (pmix_server.hpp): PMIx's server library in this process, one job
// namespace per incarnation of a direct-launched MPI world on this machine.
#include "harness/launch/pmix_server.hpp"

#include <pmix.h>
#include <pmix_server.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "base/error.hpp"

namespace fl::harness {

namespace {

// One asynchronous PMIx call the harness waits for. Shared with PMIx's callback: a call that
// answers after its deadline still finds it alive.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
};

void op_done(pmix_status_t status, void* cbdata) {
  auto* held = static_cast<std::shared_ptr<Pending>*>(cbdata);
  {
    std::lock_guard lock((*held)->mu);
    (*held)->status = status;
    (*held)->done = true;
  }
  (*held)->cv.notify_all();
  delete held;
}

// Calls `start(op_done, cbdata)` and waits for its answer within `deadline`. PMIX_OPERATION_
// SUCCEEDED from `start`: done at once, no callback comes.
template <typename Start>
void call_and_wait(const char* what, std::chrono::milliseconds deadline, Start start) {
  auto p = std::make_shared<Pending>();
  auto* held = new std::shared_ptr<Pending>(p);
  const pmix_status_t rc = start(held);
  if (rc == PMIX_OPERATION_SUCCEEDED) {
    delete held;
    return;
  }
  if (rc != PMIX_SUCCESS) {
    delete held;
    raise<Error>("PMIx server: {} failed: {}", what, PMIx_Error_string(rc));
  }
  std::unique_lock lock(p->mu);
  if (!p->cv.wait_for(lock, deadline, [&] { return p->done; })) {
    raise<Error>("PMIx server: {} did not complete within {} ms", what, deadline.count());
  }
  if (p->status != PMIX_SUCCESS && p->status != PMIX_OPERATION_SUCCEEDED) {
    raise<Error>("PMIx server: {} failed: {}", what, PMIx_Error_string(p->status));
  }
}

// The host's side of the server. Every callback answers at once (nothing here waits): on one
// machine PMIx's server has collected every rank's contribution before it calls fence_nb, so
// the fence's result is its input; the ranks' connects, finalizes and aborts need no action of
// the harness's (a rank that aborts exits, and the harness sees the exit).
pmix_status_t client_connected(const pmix_proc_t*, void*, pmix_info_t*, size_t, pmix_op_cbfunc_t,
                               void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t client_finalized(const pmix_proc_t*, void*, pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t client_abort(const pmix_proc_t*, void*, int, const char*, pmix_proc_t*, size_t,
                           pmix_op_cbfunc_t, void*) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t fence_nb(const pmix_proc_t*, size_t, const pmix_info_t*, size_t, char* data,
                       size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, data, ndata, cbdata, nullptr, nullptr);
  return PMIX_SUCCESS;
}

// A rank asks for another's data that the server does not hold: on one machine there is none.
pmix_status_t direct_modex(const pmix_proc_t*, const pmix_info_t*, size_t, pmix_modex_cbfunc_t,
                           void*) {
  return PMIX_ERR_NOT_FOUND;
}

pmix_server_module_t make_module() {
  pmix_server_module_t m;
  std::memset(&m, 0, sizeof m);
  m.client_connected2 = client_connected;
  m.client_finalized = client_finalized;
  m.abort = client_abort;
  m.fence_nb = fence_nb;
  m.direct_modex = direct_modex;
  return m;
}

pmix_server_module_t g_module = make_module();

// A list of PMIx info entries (PMIx copies each value in).
class InfoList {
 public:
  InfoList() : list_(PMIx_Info_list_start()) {}
  ~InfoList() { PMIx_Info_list_release(list_); }
  InfoList(const InfoList&) = delete;
  InfoList& operator=(const InfoList&) = delete;

  void add(const char* key, const void* value, pmix_data_type_t type) {
    if (PMIx_Info_list_add(list_, key, value, type) != PMIX_SUCCESS) {
      raise<Error>("PMIx server: cannot add {} to a job's description", key);
    }
  }
  void u32(const char* key, uint32_t v) { add(key, &v, PMIX_UINT32); }
  void u16(const char* key, uint16_t v) { add(key, &v, PMIX_UINT16); }
  void rank(const char* key, pmix_rank_t v) { add(key, &v, PMIX_PROC_RANK); }
  void str(const char* key, const std::string& v) { add(key, v.c_str(), PMIX_STRING); }
  // The entries as one array of pmix_info_t (free with PMIX_DATA_ARRAY_DESTRUCT).
  pmix_data_array_t array() {
    pmix_data_array_t a;
    PMIX_DATA_ARRAY_CONSTRUCT(&a, 0, PMIX_INFO);
    if (PMIx_Info_list_convert(list_, &a) != PMIX_SUCCESS) {
      raise<Error>("PMIx server: cannot build a job's description");
    }
    return a;
  }

 private:
  void* list_;
};

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// What Open MPI's `ess pmi` reads of one rank: its ranks in the job, the application and the
// node (all ranks share this machine: local rank = node rank = rank).
void add_rank_data(InfoList& job, int r, const std::string& host) {
  InfoList proc;
  proc.rank(PMIX_RANK, static_cast<pmix_rank_t>(r));
  proc.u32(PMIX_APPNUM, 0);
  proc.rank(PMIX_APP_RANK, static_cast<pmix_rank_t>(r));
  proc.rank(PMIX_GLOBAL_RANK, static_cast<pmix_rank_t>(r));
  proc.u16(PMIX_LOCAL_RANK, static_cast<uint16_t>(r));
  proc.u16(PMIX_NODE_RANK, static_cast<uint16_t>(r));
  proc.u32(PMIX_NODEID, 0);
  proc.str(PMIX_HOSTNAME, host);
  pmix_data_array_t a = proc.array();
  job.add(PMIX_PROC_DATA, &a, PMIX_DATA_ARRAY);
  PMIX_DATA_ARRAY_DESTRUCT(&a);
}

// The job's description: its size, its one node, its one application, its ranks.
pmix_data_array_t job_info(const std::string& nspace, int ranks) {
  const std::string host = host_name();
  std::string peers;
  for (int r = 0; r < ranks; ++r) peers += (r ? "," : "") + std::to_string(r);
  InfoList job;
  const auto n = static_cast<uint32_t>(ranks);
  job.str(PMIX_JOBID, nspace);
  for (const char* key : {PMIX_UNIV_SIZE, PMIX_JOB_SIZE, PMIX_MAX_PROCS, PMIX_APP_SIZE,
                          PMIX_LOCAL_SIZE, PMIX_NODE_SIZE}) {
    job.u32(key, n);
  }
  job.u32(PMIX_NUM_NODES, 1);
  job.u32(PMIX_JOB_NUM_APPS, 1);
  job.u32(PMIX_NODEID, 0);
  job.rank(PMIX_LOCALLDR, 0);
  job.str(PMIX_LOCAL_PEERS, peers);
  job.str(PMIX_HOSTNAME, host);
  char* regex = nullptr;
  char* ppn = nullptr;
  if (PMIx_generate_regex(host.c_str(), &regex) == PMIX_SUCCESS && regex != nullptr) {
    job.str(PMIX_NODE_MAP, regex);
  }
  if (PMIx_generate_ppn(peers.c_str(), &ppn) == PMIX_SUCCESS && ppn != nullptr) {
    job.str(PMIX_PROC_MAP, ppn);
  }
  std::free(regex);
  std::free(ppn);
  for (int r = 0; r < ranks; ++r) add_rank_data(job, r, host);
  return job.array();
}

}  // namespace

namespace {

// Set before any thread starts (static initialisation), so that no setenv races a getenv: the
// server keeps its jobs' data in memory (the hash module) instead of shared-memory files under its
// tmpdir, which would outlive a run's tmp directory. A value the user set wins.
const bool kHashGds = ::setenv("PMIX_MCA_gds", "hash", 0) == 0;

}  // namespace

PmixServer& PmixServer::in_process(const std::string& tmpdir) {
  static PmixServer* server = new PmixServer(tmpdir);  // (a failed start throws again next time)
  return *server;
}

PmixServer::PmixServer(const std::string& tmpdir) {
  (void)kHashGds;
  InfoList init;
  init.str(PMIX_SERVER_TMPDIR, tmpdir);
  init.str(PMIX_SYSTEM_TMPDIR, tmpdir);
  const bool no = false;
  init.add(PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);  // no rendezvous file for tools
  init.add(PMIX_SERVER_SYSTEM_SUPPORT, &no, PMIX_BOOL);
  pmix_data_array_t a = init.array();
  const pmix_status_t rc = PMIx_server_init(&g_module, static_cast<pmix_info_t*>(a.array), a.size);
  PMIX_DATA_ARRAY_DESTRUCT(&a);
  if (rc != PMIX_SUCCESS) {
    raise<Error>("PMIx server: cannot start (tmpdir {}): {}", tmpdir, PMIx_Error_string(rc));
  }
}

void PmixServer::deregister_job(const std::string& nspace, std::chrono::milliseconds deadline) {
  std::lock_guard lock(mu_);
  if (jobs_.erase(nspace) == 0) return;
  pmix_nspace_t ns;
  PMIX_LOAD_NSPACE(ns, nspace.c_str());
  call_and_wait("deregistering a job", deadline, [&](void* cbdata) {
    PMIx_server_deregister_nspace(ns, op_done, cbdata);
    return PMIX_SUCCESS;
  });
}

void PmixServer::register_job(const std::string& nspace, int ranks,
                              std::chrono::milliseconds deadline) {
  std::lock_guard lock(mu_);
  if (jobs_.count(nspace)) raise<Error>("PMIx server: job '{}' is registered already", nspace);
  pmix_nspace_t ns;
  PMIX_LOAD_NSPACE(ns, nspace.c_str());
  pmix_data_array_t info = job_info(nspace, ranks);
  // (After a missed deadline PMIx may still read `info`: it is left to the process's end.)
  call_and_wait("registering a job", deadline, [&](void* cbdata) {
    return PMIx_server_register_nspace(ns, ranks, static_cast<pmix_info_t*>(info.array), info.size,
                                       op_done, cbdata);
  });
  PMIX_DATA_ARRAY_DESTRUCT(&info);
  jobs_[nspace] = ranks;
  for (int r = 0; r < ranks; ++r) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, ns, static_cast<pmix_rank_t>(r));
    call_and_wait("registering a rank", deadline, [&](void* cbdata) {
      return PMIx_server_register_client(&proc, ::geteuid(), ::getegid(), nullptr, op_done, cbdata);
    });
  }
}

std::map<std::string, std::string> PmixServer::rank_env(const std::string& nspace, int rank) const {
  {
    std::lock_guard lock(mu_);
    const auto it = jobs_.find(nspace);
    if (it == jobs_.end() || rank < 0 || rank >= it->second) {
      raise<Error>("PMIx server: no rank {} in job '{}'", rank, nspace);
    }
  }
  pmix_proc_t proc;
  PMIX_LOAD_PROCID(&proc, nspace.c_str(), static_cast<pmix_rank_t>(rank));
  char** env = static_cast<char**>(std::calloc(1, sizeof(char*)));
  const pmix_status_t rc = PMIx_server_setup_fork(&proc, &env);
  std::map<std::string, std::string> out;
  for (char** e = env; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    if (const auto eq = kv.find('='); eq != std::string::npos) {
      out[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    std::free(*e);
  }
  std::free(env);
  if (rc != PMIX_SUCCESS) {
    raise<Error>("PMIx server: no environment for rank {}: {}", rank, PMIx_Error_string(rc));
  }
  return out;
}

}  // namespace fl::harness
