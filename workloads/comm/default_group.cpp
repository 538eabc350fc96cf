// The default process group (default_group.hpp).
#include "workloads/comm/default_group.hpp"

#include <atomic>

#include "workloads/comm/communicator.hpp"

namespace fl::comm {

namespace {

std::atomic<Communicator*> g_world{nullptr};

Communicator& world_or_throw() {
  Communicator* w = g_world.load();
  // torch.distributed.distributed_c10d._get_default_group's text.
  if (!w) {
    throw CommError(
        "Default process group has not been initialized, please make sure to call "
        "init_process_group.");
  }
  return *w;
}

}  // namespace

void set_default_group(Communicator* world) {
  g_world.store(world);
}
bool default_group_initialized() {
  return g_world.load() != nullptr;
}
int default_group_rank() {
  return world_or_throw().rank();
}
int default_group_size() {
  return world_or_throw().size();
}
int rank_or_zero() {
  return default_group_initialized() ? default_group_rank() : 0;
}
int world_size_or_one() {
  return default_group_initialized() ? default_group_size() : 1;
}

}  // namespace fl::comm
