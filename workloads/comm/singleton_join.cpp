#include "workloads/comm/singleton_join.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace fl::comm {

std::string TreeJoinRound::port_key() const {
  return fmt::format("mpi/tree/{}/{}", block_size, pair);
}

std::string TreeJoinRound::connecting_key() const {
  return port_key() + "/connecting";
}

std::vector<TreeJoinRound> tree_join_rounds(int rank, int world_size) {
  std::vector<TreeJoinRound> rounds;
  for (int b = 1; b < world_size; b *= 2) {
    const int block = rank / b;
    TreeJoinRound r;
    r.block_size = b;
    r.accepting = block % 2 == 0;
    if (r.accepting && (block + 1) * b >= world_size) continue;  // no partner this round
    r.leader = rank % b == 0;
    r.pair = r.accepting ? block : block - 1;
    const int partner = r.accepting ? block + 1 : block - 1;
    r.partner_first = partner * b;
    r.partner_last = std::min(world_size, (partner + 1) * b) - 1;
    rounds.push_back(r);
  }
  return rounds;
}

JoinDeadline::JoinDeadline(std::chrono::milliseconds total)
    : total_(total), until_(std::chrono::steady_clock::now() + total) {}

std::chrono::milliseconds JoinDeadline::left() const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until_ - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

std::string wait_for_partner(rdzv::StoreClient& store, const std::string& key, int rank,
                             const TreeJoinRound& round, const JoinDeadline& deadline) {
  try {
    return store.get(key, deadline.left());
  } catch (const rdzv::StoreError& e) {
    if (e.kind() != rdzv::StoreErrorKind::kKeyTimeout) throw;
    const std::string ranks =
        round.partner_first == round.partner_last
            ? fmt::format("rank {}", round.partner_first)
            : fmt::format("ranks {}-{}", round.partner_first, round.partner_last);
    throw rdzv::StoreError(
        rdzv::StoreErrorKind::kKeyTimeout,
        fmt::format("[rank {}] joining the MPI world (round of {}-rank blocks): {} did not come "
                    "to {} within the rendezvous deadline of {} ms (FAULTLINE_RDZV_TIMEOUT_MS, "
                    "the scenario's timeouts.rendezvous_ms); the store said: {}",
                    rank, round.block_size, ranks, round.accepting ? "connect" : "accept",
                    deadline.total().count(), e.what()));
  }
}

}  // namespace fl::comm
