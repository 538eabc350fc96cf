// Simulated device lists as the CUDA runtime reads CUDA_VISIBLE_DEVICES: indices, GPU-/MIG- UUIDs
// (whole or a unique prefix), and the list ending at the first entry that names no device.
#include <gtest/gtest.h>

#include <regex>

#include "base/device_list.hpp"

namespace fl::comm {
namespace {

using V = std::vector<int64_t>;

TEST(DeviceList, UuidsAreStableWellFormedAndDistinct) {
  const std::regex form("(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  EXPECT_TRUE(std::regex_match(simulated_gpu_uuid(0, 0), form)) << simulated_gpu_uuid(0, 0);
  EXPECT_TRUE(std::regex_match(simulated_mig_uuid(0, 0), form)) << simulated_mig_uuid(0, 0);
  EXPECT_EQ(simulated_gpu_uuid(1, 3), simulated_gpu_uuid(1, 3));
  EXPECT_NE(simulated_gpu_uuid(0, 1), simulated_gpu_uuid(1, 1));  // other node, other device
  EXPECT_NE(simulated_gpu_uuid(0, 1), simulated_gpu_uuid(0, 2));
  // The values the docs and scenarios name (docs/workloads.md): they never change.
  EXPECT_EQ(simulated_gpu_uuid(0, 0), "GPU-9716547d-6d8f-e4ad-9b01-17f3c6f18b71");
  EXPECT_EQ(simulated_gpu_uuid(0, 1), "GPU-504f72a4-dde8-ee0a-6af2-2ec8a0bb3288");
  EXPECT_EQ(simulated_mig_uuid(0, 0), "MIG-d85f443a-91fa-20bb-f294-9f8b955ea2d6");
}

TEST(DeviceList, IndicesUuidsPrefixesAndMigIdsNameDevices) {
  EXPECT_EQ(parse_visible_devices("2,0", 0, 4), (V{2, 0}));
  EXPECT_EQ(parse_visible_devices(" 1 , 3", 0, 4), (V{1, 3}));
  const std::string g2 = simulated_gpu_uuid(0, 2), g1 = simulated_gpu_uuid(0, 1);
  EXPECT_EQ(parse_visible_devices(g2 + "," + g1, 0, 4), (V{2, 1}));
  EXPECT_EQ(parse_visible_devices(g2.substr(0, 12), 0, 4), (V{2}));  // a unique prefix
  EXPECT_EQ(parse_visible_devices(simulated_mig_uuid(0, 3), 0, 4), (V{3}));
  EXPECT_EQ(parse_visible_devices("0," + g1, 0, 4), (V{0, 1}));  // forms mix
}

TEST(DeviceList, TheListEndsAtTheFirstEntryThatNamesNoDevice) {
  EXPECT_EQ(parse_visible_devices("0,7,1", 0, 4), (V{0}));  // out of range
  EXPECT_EQ(parse_visible_devices("1,1,2", 0, 4), (V{1}));  // named twice
  EXPECT_EQ(parse_visible_devices("GPU-,0", 0, 4), V{});    // a prefix of every device
  EXPECT_EQ(parse_visible_devices("1," + simulated_gpu_uuid(1, 0), 0, 4), (V{1}));  // node 1's
  EXPECT_EQ(parse_visible_devices("-1,0", 0, 4), V{});
  EXPECT_EQ(parse_visible_devices("", 0, 4), V{});
  EXPECT_EQ(parse_visible_devices("NoDevFiles", 0, 4), V{});
}

}  // namespace
}  // namespace fl::comm
