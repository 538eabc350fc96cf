#include "harness/launch/mpi_tuning.hpp"

#include <sched.h>

#include "harness/model/scenario.hpp"

namespace fl::harness {

namespace {

bool one_machine_mpi(const Scenario& s) {
  return s.topo.backend == "mpi" && s.topo.hosts.empty();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> local_mpi_params(const Scenario& s) {
  if (!one_machine_mpi(s)) return {};
  static const std::pair<const char*, const char*> kParams[] = {
      {"pml", "ob1"},          // not cm (OFI/PSM MTLs) or ucx, each probed at MPI_Init
      {"osc", "^ucx"},         // one-sided: sm, pt2pt, rdma over the BTLs below
      {"btl", "^openib,ofi"},  // self, vader (shared memory) and tcp (network namespaces)
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : kParams) {
    if (!s.env.sets(std::string("OMPI_MCA_") + name)) out.emplace_back(name, value);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> local_mpi_env(const Scenario& s) {
  if (!one_machine_mpi(s)) return {};
  static const std::pair<const char*, const char*> kEnv[] = {
      // hwloc 2.x: plugins not loaded at all (hwloc_pci pulls libpciaccess, hwloc_opencl
      // libOpenCL, hwloc_gl X11; the built-in XML reader serves without libxml2) ...
      {"HWLOC_PLUGINS_BLACKLIST", "hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml"},
      // ... and the Linux backend's I/O phases (block, network, DAX devices in sysfs) skipped.
      {"HWLOC_COMPONENTS", "-linuxio"},
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : kEnv) {
    if (!s.env.sets(name)) out.emplace_back(name, value);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> singleton_mpi_params(const Scenario& s, int cpus) {
  if (!one_machine_mpi(s) || s.topo.ranks <= cpus) return {};
  if (s.env.sets("OMPI_MCA_mpi_yield_when_idle")) return {};
  return {{"mpi_yield_when_idle", "1"}};
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

}  // namespace fl::harness
