#include "workloads/train/memory_report.hpp"

#include <cstdio>
#include <vector>

namespace fl::train {

void print_memory_report(comm::Communicator& world, const MemoryAccountant& device,
                         const MemoryAccountant& host, ZeroTransients zero) {
  constexpr int kFields = kMemCategories + 5;
  std::vector<int64_t> mine(kFields);
  for (int c = 0; c < kMemCategories; ++c) {
    mine[static_cast<size_t>(c)] = static_cast<int64_t>(device.peak(static_cast<MemCategory>(c)));
  }
  mine[kMemCategories] = static_cast<int64_t>(device.model_state_peak());
  mine[kMemCategories + 1] = static_cast<int64_t>(device.run_peak());
  mine[kMemCategories + 2] = static_cast<int64_t>(host.run_peak());
  mine[kMemCategories + 3] = static_cast<int64_t>(zero.bucket);
  mine[kMemCategories + 4] = static_cast<int64_t>(zero.layer);
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(world.size()));
  world.all_gather(comm::host_buffer(mine.data(), mine.size(), DType::kI64),
                   comm::host_buffer(all.data(), all.size(), DType::kI64));
  if (world.rank() != 0) return;
  std::printf(
      "# memory report: peak bytes per category since the start (model_states: params + "
      "grads + optimizer held at once)\n");
  for (int r = 0; r < world.size(); ++r) {
    const int64_t* f = all.data() + static_cast<size_t>(r) * kFields;
    std::printf("memory rank %d:", r);
    for (int c = 0; c < kMemCategories; ++c) {
      std::printf(" %s %lld", memory_category_name(static_cast<MemCategory>(c)),
                  static_cast<long long>(f[c]));
    }
    std::printf(" model_states %lld peak %lld host %lld bucket %lld layer %lld\n",
                static_cast<long long>(f[kMemCategories]),
                static_cast<long long>(f[kMemCategories + 1]),
                static_cast<long long>(f[kMemCategories + 2]),
                static_cast<long long>(f[kMemCategories + 3]),
                static_cast<long long>(f[kMemCategories + 4]));
  }
  std::fflush(stdout);
}

}  // namespace fl::train
