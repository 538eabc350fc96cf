// The check every worker makes at start, whatever the backend: all ranks agree on the world size,
// ranks are unique and in range, and every rank has the same run id and config hash. Launch
// misconfigurations surface here, each as its own error naming the ranks involved.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "workloads/rendezvous/store_client.hpp"

namespace fl::rdzv {

struct MemberInfo {
  int rank = -1;
  int world_size = 0;
  int local_rank = -1;
  std::string run_id;
  std::string config_hash;
  std::string host;
  int pid = 0;
};

enum class WorldCheckFailure {
  kWorldSizeMismatch,
  kRunIdMismatch,
  kConfigHashMismatch,
  kRankOutOfRange,
  kDuplicateRank,
  kMissingRanks,  // the rendezvous timed out
};

class WorldCheckError : public Error {
 public:
  WorldCheckError(WorldCheckFailure failure, std::string msg)
      : Error(std::move(msg)), failure_(failure) {}
  WorldCheckFailure failure() const { return failure_; }

 private:
  WorldCheckFailure failure_;
};

struct World {
  std::vector<MemberInfo> members;  // indexed by rank
};

// Registers `me` and waits (up to `timeout` in all) for the rest of the world, then validates.
// Every rank sees the same members in the same order, so every rank reports the same error.
World check_world(StoreClient& store, const MemberInfo& me, std::chrono::milliseconds timeout);

// How many ranks have registered / have reached a verdict (pass or fail) so far.
int64_t arrivals(StoreClient& store);
int64_t decided(StoreClient& store);

// Pure validation of an arrival-ordered member list (exposed for tests). Returns normally when
// the members form exactly ranks 0..W-1 of one world; throws WorldCheckError otherwise.
// `expected` is the world size the caller waited for.
void validate_world(const std::vector<MemberInfo>& members, int expected);

}  // namespace fl::rdzv
