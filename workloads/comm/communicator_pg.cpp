// How communicators appear as process groups in the flight recorder's PyTorch-schema dump: ids
// in creation order, member world ranks, and the on-demand dump armed with the first group.
#include <algorithm>
#include <numeric>

#include "workloads/comm/communicator.hpp"

namespace fl::comm {

void Communicator::ensure_registered() {
  if (pg_registered_) return;
  if (pg_id_ < 0) pg_id_ = recorder_->reserve_pg_id();
  if (members_.empty()) {
    members_.resize(static_cast<size_t>(size_));
    std::iota(members_.begin(), members_.end(), 0);
  }
  recorder_->register_group(pg_id_, group_ == "world" ? "default_pg" : group_, members_);
  pg_registered_ = true;
  FlightRecorder::enable_dump_on_signal(recorder_, options_.dump_dir, world_rank_);
}

FlightEntry Communicator::stamped(FlightEntry d) {
  ensure_registered();
  d.pg_id = pg_id_;
  d.group_rank = rank_;
  d.group_size = size_;
  d.timeout_ms = options_.timeout.count();
  return d;
}

int Communicator::reserve_child_pg() {
  ensure_registered();
  return recorder_->reserve_pg_id();
}

std::unique_ptr<Communicator> Communicator::adopt(std::unique_ptr<Communicator> child, int pg_id,
                                                  const std::vector<int32_t>& colors_keys,
                                                  int color) {
  if (!child) return child;
  // World ranks of the child's members, in child-rank order (key, then parent rank).
  std::vector<std::pair<int, int>> order;  // (key, parent rank)
  for (int i = 0; i < size_; ++i) {
    if (colors_keys[2 * static_cast<size_t>(i)] == color) {
      order.emplace_back(colors_keys[2 * static_cast<size_t>(i) + 1], i);
    }
  }
  std::sort(order.begin(), order.end());
  child->members_.clear();
  for (auto [k, i] : order) child->members_.push_back(members_[static_cast<size_t>(i)]);
  child->pg_id_ = pg_id;
  child->ensure_registered();
  return child;
}

}  // namespace fl::comm
