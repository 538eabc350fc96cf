#include "workloads/comm/worker_errors.hpp"

#include <cstdio>

#include "base/exit_codes.hpp"
#include "base/settings.hpp"
#include "injector/plan.hpp"
#include "injector/site.hpp"
#include "kernels/loss_scaler.hpp"
#include "kernels/memory.hpp"
#include "kernels/plugin.hpp"
#include "workloads/comm/errors.hpp"
#include "workloads/comm/log_dialect.hpp"
#include "workloads/comm/mpi_communicator.hpp"
#include "workloads/rendezvous/artifacts.hpp"
#include "workloads/rendezvous/store_client.hpp"
#include "workloads/rendezvous/store_server.hpp"
#include "workloads/rendezvous/world_check.hpp"
#include "workloads/telemetry/telemetry.hpp"

namespace fl::comm {

int run_worker_main(const std::function<int()>& body) {
  auto report = [](const char* kind, const std::exception& e, int code) {
    // Under FAULTLINE_LOG_FIDELITY=pytorch the lines a real job prints replace faultline's own
    // where a real job has a counterpart; the error event keeps faultline's message.
    std::vector<std::string> lines;
    try {
      if (pytorch_dialect()) lines = pytorch_lines(e, kind, fault::current_rank());
    } catch (const std::exception& bad) {
      std::fprintf(stderr, "faultline worker error (setting): %s\n", bad.what());
    }
    for (auto& l : lines) std::fprintf(stderr, "%s\n", l.c_str());
    if (lines.empty()) std::fprintf(stderr, "faultline worker error (%s): %s\n", kind, e.what());
    std::fflush(stderr);
    telemetry::emit("error", {{"class", kind}, {"message", e.what()}, {"exit_code", code}});
    telemetry::emit("exit", {{"exit_code", code}, {"dropped", telemetry::stats().dropped}});
    telemetry::stop(std::chrono::milliseconds(1000));
    // Under mpirun, end the whole job the way MPI programs do on a fatal error. Exiting without
    // MPI_Finalize while a peer is inside it can deadlock Open MPI 4.1's launcher (PMIx server
    // finalize), which would turn a clean failure into a hung job.
    mpi_abort_if_running(code);
    return code;
  };
  try {
    const int code = body();
    telemetry::emit("exit", {{"exit_code", code}, {"dropped", telemetry::stats().dropped}});
    telemetry::stop();
    return code;
  } catch (const CommTimeoutError& e) {
    return report("comm timeout", e, exit_code::kCommTimeout);
  } catch (const CommMismatchError& e) {
    return report("comm mismatch", e, exit_code::kCommMismatch);
  } catch (const CommError& e) {
    return report("comm", e, exit_code::kCommError);
  } catch (const rdzv::WorldCheckError& e) {
    return report("rendezvous", e, exit_code::kRendezvous);
  } catch (const rdzv::StoreError& e) {
    return report("store", e, exit_code::kStore);
  } catch (const rdzv::BindError& e) {
    return report("store", e, exit_code::kStore);
  } catch (const SettingError& e) {
    return report("setting", e, exit_code::kUsage);
  } catch (const CheckpointError& e) {
    return report("checkpoint", e, exit_code::kCheckpoint);
  } catch (const fault::PlanError& e) {
    return report("fault plan", e, exit_code::kUsage);
  } catch (const ConfigError& e) {
    return report("config", e, exit_code::kUsage);
  } catch (const OutOfMemoryError& e) {
    return report("out of memory", e, exit_code::kOutOfMemory);
  } catch (const ops::PluginError& e) {
    return report("plugin", e, exit_code::kPlugin);
  } catch (const rdzv::ArtifactError& e) {
    return report("artifact", e, exit_code::kArtifact);
  } catch (const DeviceError& e) {
    return report("device", e, exit_code::kDevice);
  } catch (const LossScaleError& e) {
    return report("loss scale", e, exit_code::kLossScale);
  } catch (const std::exception& e) {
    return report("error", e, exit_code::kError);
  }
}

}  // namespace fl::comm
