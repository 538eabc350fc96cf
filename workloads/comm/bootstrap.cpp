#include "workloads/comm/bootstrap.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "base/device_list.hpp"
#include "injector/plan.hpp"
#include "injector/site.hpp"
#include "workloads/comm/collective_watch.hpp"
#include "workloads/comm/mpi_communicator.hpp"
#include "workloads/telemetry/telemetry.hpp"
#if defined(FAULTLINE_HAVE_NCCL)
#include "workloads/comm/nccl_communicator.hpp"
#endif

namespace fl::comm {

namespace {

int int_env(const char* name, const char* fallback, bool required, int default_value) {
  const char* v = std::getenv(name);
  const char* used = name;
  if ((v == nullptr || *v == '\0') && fallback != nullptr) {
    v = std::getenv(fallback);
    used = fallback;
  }
  if (v == nullptr || *v == '\0') {
    if (!required) return default_value;
    raise<SettingError>(
        "{} is not set: the launcher must give every worker {} (or run it under "
        "mpirun, which sets {})",
        name, name, fallback ? fallback : "it");
  }
  return static_cast<int>(parse_setting<int64_t>(used, v));
}

}  // namespace

WorkerIdentity identity_from_env() {
  WorkerIdentity id;
  id.rank = int_env("RANK", "OMPI_COMM_WORLD_RANK", true, -1);
  id.world_size = int_env("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", true, 0);
  id.local_rank = int_env("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", false, 0);
  id.node_rank = int_env("NODE_RANK", "OMPI_COMM_WORLD_NODE_RANK", false, 0);
  if (id.world_size <= 0) {
    raise<SettingError>("WORLD_SIZE={} is not a valid world size (allowed: 1 or more)",
                        id.world_size);
  }
  id.run_id = kRunId.get();
  id.master_addr = rdzv::kMasterAddr.get();
  int64_t port = rdzv::kMasterPort.get();
  if (port <= 0 || port > 65535) {
    raise<SettingError>("MASTER_PORT={} is out of range (allowed 1-65535)", port);
  }
  id.master_port = static_cast<int>(port);
  return id;
}

double process_cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

void start_worker_telemetry(const WorkerIdentity& id, const std::string& backend) {
  auto opts = telemetry::options_from_env();
  // The harness arms and clears fault plans over the control plane.
  opts.on_command = [](const std::string& action, const std::string& plan, uint64_t seed) {
    try {
      if (action == "arm_faults") {
        fault::arm_text(plan, "control plane", seed);
      } else if (action == "clear_faults") {
        fault::disarm();
      } else {
        raise<SettingError>("unknown control command '{}' (allowed: arm_faults, clear_faults)",
                            action);
      }
      telemetry::emit("faults_armed", {{"plan", fault::armed_plan()}});
    } catch (const std::exception& e) {
      telemetry::emit("log", {{"level", "error"}, {"message", e.what()}});
    }
  };
  telemetry::start(id.rank, std::move(opts));
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  telemetry::emit("hello", {{"world_size", id.world_size},
                            {"local_rank", id.local_rank},
                            {"pid", ::getpid()},
                            {"host", host},
                            {"backend", backend},
                            {"run_id", id.run_id},
                            {"cpu_ms", process_cpu_ms()}});
  fault::set_fired_observer([](const fault::FiredRecord& r) {
    // An inference counts its fault-plan steps from the first generated token, so a site that
    // fires while the prompt is read has a negative step; the event carries -1 (none) and the
    // plan's own counter as data.plan_step.
    nlohmann::json data = {{"site", r.site}, {"seq", r.seq}, {"hit", r.hit}, {"action", r.action}};
    if (r.step < -1) data["plan_step"] = r.step;
    telemetry::emit("fault_fired", data, r.step);
  });
}

FAULTLINE_SETTING(kVisibleDevices, std::string, "FAULTLINE_VISIBLE_DEVICES", "",
                  "Devices a CPU rank may use, e.g. 0,1 (empty: all of the node's)");
FAULTLINE_SETTING(kDevicesPerNode, int64_t, "FAULTLINE_DEVICES_PER_NODE", 0,
                  "Simulated devices per node for CPU ranks (0: LOCAL_WORLD_SIZE)");
FAULTLINE_SETTING(kDeviceOrdinal, std::string, "FAULTLINE_DEVICE_ORDINAL", "local_rank",
                  "Which visible device a CPU rank selects: local_rank (set_device(LOCAL_RANK)) "
                  "or rank (set_device(dist.get_rank()), right on the first node only)");

int select_device(const WorkerIdentity& id) {
  // The device query: a plan can slow it (a device that takes long to initialise) or fail it.
  if (FAULTLINE_FAULT_POINT("device.query", (fault::SiteContext{-1, "", "device.query", -1, nullptr,
                                                                0, DType::kU8, -1})) ==
      fault::Verdict::kFail) {
    raise<DeviceError>("[rank {}] device query failed on node {} (fault injected at device.query)",
                       id.rank, id.node_rank);
  }
  int64_t per_node = kDevicesPerNode.get();
  if (per_node <= 0) per_node = int_env("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", false, 1);
  // FAULTLINE_VISIBLE_DEVICES, else the CUDA_VISIBLE_DEVICES a launcher or scheduler gave the
  // rank (indices, GPU-/MIG- UUIDs of the simulated devices: base/device_list.hpp).
  // On a host with real GPUs the variable is the CUDA runtime's, not the simulation's.
  const char* cuda_list = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cuda_list != nullptr && cuda_device_count() > 0) cuda_list = nullptr;
  const bool narrowed = kVisibleDevices.is_set_in_env() || cuda_list != nullptr;
  const std::string source =
      kVisibleDevices.is_set_in_env() ? "FAULTLINE_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
  const std::string list = kVisibleDevices.is_set_in_env() ? kVisibleDevices.get()
                           : cuda_list != nullptr          ? std::string(cuda_list)
                                                           : std::string();
  std::vector<int64_t> visible;
  if (!narrowed) {
    for (int64_t d = 0; d < per_node; ++d) visible.push_back(d);
  } else {
    visible = parse_visible_devices(list, id.node_rank, per_node);
  }
  const std::string by = kDeviceOrdinal.get();
  if (by != "local_rank" && by != "rank") {
    raise<SettingError>("FAULTLINE_DEVICE_ORDINAL='{}' is not allowed (allowed: local_rank, rank)",
                        by);
  }
  const int ordinal = by == "rank" ? id.rank : id.local_rank;
  if (ordinal >= static_cast<int>(visible.size())) {
    raise<DeviceError>(
        "[rank {}] invalid device ordinal: {} {} selects device {}, but {} device(s) "
        "are visible on node {} ({}='{}', {} on the node)",
        id.rank, by == "rank" ? "RANK" : "LOCAL_RANK", ordinal, ordinal, visible.size(),
        id.node_rank, source, list, per_node);
  }
  return static_cast<int>(visible[static_cast<size_t>(ordinal)]);
}

int gpu_for_rank(const WorkerIdentity& id, const std::string& backend) {
  std::string map = kGpuMap.get();
  if (map.empty()) map = backend == "nccl" ? "exclusive" : "shared";
  if (map == "exclusive") return id.local_rank;
  if (map == "shared") {
    const int n = cuda_device_count();
    return n > 0 ? id.local_rank % n : 0;
  }
  raise<SettingError>("FAULTLINE_GPU_MAP='{}' is not allowed (allowed: exclusive, shared)", map);
}

namespace {

// Each process binds its device before it joins the world (CUDA ranks: the real
// CUDA_VISIBLE_DEVICES decides when NCCL binds LOCAL_RANK's GPU).
void bind_device(Bootstrap& b, const std::string& backend, const std::string& compute) {
  const std::string kind = compute.empty() ? kComputeDevice.get() : compute;
  if (kind != "cpu" && kind != "cuda") {
    raise<SettingError>("FAULTLINE_DEVICE='{}' is not allowed (allowed: cpu, cuda)", kind);
  }
  if (kind == "cuda" || backend == "nccl") {
    b.device = gpu_for_rank(b.id, backend);
    if (kind == "cuda") {
      b.compute = fl::Device::cuda(b.device);
      set_current_device(b.compute);  // DeviceError when the GPU is absent or out of range
    }
  } else if (backend == "mpi") {
    b.device = select_device(b.id);
  }
}

// Rank 0 serves the rendezvous store unless the harness does (FAULTLINE_STORE_HOST=external).
void serve_store_if_host(Bootstrap& b) {
  const std::string host_mode = kStoreHost.get();
  if (host_mode != "rank0" && host_mode != "external") {
    raise<SettingError>("FAULTLINE_STORE_HOST='{}' is not allowed (allowed: rank0, external)",
                        host_mode);
  }
  if (host_mode != "rank0" || b.id.rank != 0) return;
  // A launcher that hosts the store (fl-launch, as torchrun's agent) bound the port already.
  const int64_t fd = kStoreListenFd.get();
  b.server = fd >= 0 ? rdzv::StoreServer::adopt(static_cast<int>(fd), b.id.master_addr)
                     : std::make_unique<rdzv::StoreServer>(b.id.master_addr,
                                                           static_cast<uint16_t>(b.id.master_port));
  b.server->start();
}

// Reaches the store and checks that the whole world arrived with the same run and configuration.
void join_world(Bootstrap& b, const std::string& config_hash) {
  const auto timeout = std::chrono::milliseconds(kRendezvousTimeoutMs.get());
  b.store = std::make_unique<rdzv::StoreClient>(
      b.id.master_addr, static_cast<uint16_t>(b.id.master_port),
      std::chrono::milliseconds(rdzv::kStoreTimeoutMs.get()), timeout);
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  rdzv::MemberInfo me{b.id.rank,
                      b.id.world_size,
                      b.id.local_rank,
                      b.id.run_id,
                      config_hash,
                      host,
                      static_cast<int>(::getpid())};
  try {
    b.world = rdzv::check_world(*b.store, me, timeout);
  } catch (const rdzv::WorldCheckError&) {
    // The others read the member list from this process's store: keep serving until each has
    // reached its own verdict (bounded), so every rank reports the same error.
    if (b.server) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (std::chrono::steady_clock::now() < until &&
             rdzv::decided(*b.store) < rdzv::arrivals(*b.store)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    throw;
  }
}

// The world communicator of `backend` (mpi or nccl), formed through the store.
std::unique_ptr<Communicator> world_communicator(Bootstrap& b, const std::string& backend) {
  if (backend == "mpi") {
    return MpiCommunicator::create_world(b.id.rank, b.id.world_size, {}, b.store.get(),
                                         std::chrono::milliseconds(kRendezvousTimeoutMs.get()));
  }
  if (backend == "nccl") {
#if defined(FAULTLINE_HAVE_NCCL)
    return create_nccl_world(b.id.rank, b.id.world_size, b.device, *b.store);
#else
    raise<SettingError>(
        "backend 'nccl' requested but this build has no NCCL (configure with "
        "FAULTLINE_CUDA=ON on a machine with CUDA and NCCL)");
#endif
  }
  raise<SettingError>("FAULTLINE_BACKEND='{}' is not allowed (allowed: mpi, nccl)", backend);
}

}  // namespace

Bootstrap bootstrap_worker(const std::string& config_hash, const std::string& backend,
                           const std::string& compute) {
  Bootstrap b;
  if (kParentDeathSignal.get()) {
    // Under mpirun: end with the launcher even when it is SIGKILLed (the harness sets this up
    // itself for the ranks it forks).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) raise<SettingError>("the launcher died before this rank started");
  }
  b.id = identity_from_env();
  fault::set_rank(b.id.rank);
  fault::set_node(b.id.node_rank);
  start_worker_telemetry(b.id, backend);
  fault::arm_from_env();  // FAULTLINE_FAULTS: standalone fault plans (throws on a bad plan)
  bind_device(b, backend, compute);
  serve_store_if_host(b);
  join_world(b, config_hash);
  const double cpu_before_world = process_cpu_ms();
  b.comm = world_communicator(b, backend);
  b.world_cpu_ms = process_cpu_ms() - cpu_before_world;
  b.collective_watch = CollectiveWatch::install(b.comm->recorder());
  return b;
}

void finish_worker(Bootstrap& b) {
  if (b.comm) b.comm->barrier();
}

}  // namespace fl::comm
