#include "harness/run/mpi_tuning.hpp"

#include "harness/scenario/scenario.hpp"

namespace fl::harness {

std::vector<std::pair<std::string, std::string>> local_mpi_params(const Scenario& s) {
  if (s.backend != "mpi" || !s.hosts.empty()) return {};
  static const std::pair<const char*, const char*> kParams[] = {
      {"pml", "ob1"},          // not cm (OFI/PSM MTLs) or ucx, each probed at MPI_Init
      {"osc", "^ucx"},         // one-sided: sm, pt2pt, rdma over the BTLs below
      {"btl", "^openib,ofi"},  // self, vader (shared memory) and tcp (network namespaces)
  };
  auto set_by_scenario = [&](const std::string& var) {
    if (s.env.count(var)) return true;
    for (const auto& [rank, env] : s.rank_env) {
      if (env.count(var)) return true;
    }
    return false;
  };
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : kParams) {
    if (!set_by_scenario(std::string("OMPI_MCA_") + name)) out.emplace_back(name, value);
  }
  return out;
}

}  // namespace fl::harness
