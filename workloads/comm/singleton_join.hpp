// The plan of the tree join of MPI singletons (ranks the local launcher starts one by one) and
// its store waits, apart from MPI so that both can be checked without an MPI world.
//
// In the round of block size b, the ranks are blocks of b consecutive ranks, each already one
// communicator; each even block accepts the odd block after it through a port its first rank
// opens and publishes in the store. log2(world) rounds, the pairs of a round side by side, one
// connect per port (Open MPI 4.1 can deadlock when several singletons connect to one port at
// once). Every wait for a partner goes through the store within the rendezvous deadline
// (FAULTLINE_RDZV_TIMEOUT_MS, the scenario's timeouts.rendezvous_ms), so a partner that never
// comes ends the join with an error naming it rather than leaving the rank in MPI for ever.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "workloads/rendezvous/store_client.hpp"

namespace fl::comm {

// One rank's part in one round.
struct TreeJoinRound {
  int block_size = 1;      // b: ranks in each block before the round
  bool accepting = false;  // its block is even and accepts; else it connects
  bool leader = false;     // the first rank of its block: opens (accepting) or reads the port
  int pair = 0;            // the accepting block's index: names the round's keys
  int partner_first = 0, partner_last = 0;  // the other block's ranks

  std::string port_key() const;        // mpi/tree/<b>/<pair>: the accepting leader's port
  std::string connecting_key() const;  // mpi/tree/<b>/<pair>/connecting: the connector is there
};

// The rounds `rank` takes part in, in order; a block without a partner sits a round out.
std::vector<TreeJoinRound> tree_join_rounds(int rank, int world_size);

// The whole join's deadline: `total` from when it was made.
class JoinDeadline {
 public:
  explicit JoinDeadline(std::chrono::milliseconds total);
  std::chrono::milliseconds total() const { return total_; }
  // What is left, at least 1 ms (a store wait of 0 would wait for the client's default).
  std::chrono::milliseconds left() const;

 private:
  std::chrono::milliseconds total_;
  std::chrono::steady_clock::time_point until_;
};

// store.get(key) within the deadline. When it runs out: StoreError kKeyTimeout naming the rank,
// the round, the partner ranks that did not come and the deadline with its setting.
std::string wait_for_partner(rdzv::StoreClient& store, const std::string& key, int rank,
                             const TreeJoinRound& round, const JoinDeadline& deadline);

}  // namespace fl::comm
