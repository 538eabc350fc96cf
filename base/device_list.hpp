// Device lists as the CUDA runtime reads CUDA_VISIBLE_DEVICES, for CPU ranks' simulated devices.
// Every simulated device has a stable UUID (the same on every run and host, from its node and
// index) and one MIG instance with a UUID of its own, so a list may name devices by index
// ("0,2"), by UUID ("GPU-3e2a...", or any unique prefix of it, as CUDA allows) or by MIG UUID
// ("MIG-..."). As with CUDA, the list ends at the first entry that names no device (an index out
// of range, an unknown or ambiguous UUID, a device named twice): what came before stays visible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fl::comm {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of device `index` on node `node`.
std::string simulated_gpu_uuid(int node, int64_t index);
// "MIG-xxxxxxxx-..." of that device's MIG instance.
std::string simulated_mig_uuid(int node, int64_t index);

// The devices `list` makes visible, in its order, out of `per_node` devices of `node`.
std::vector<int64_t> parse_visible_devices(const std::string& list, int node, int64_t per_node);

}  // namespace fl::comm
