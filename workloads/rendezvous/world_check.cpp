#include "workloads/rendezvous/world_check.hpp"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "base/json_bounded.hpp"
#include "base/ranks.hpp"

namespace fl::rdzv {

namespace {

constexpr const char* kArrivals = "rdzv/arrivals";
constexpr const char* kDecided = "rdzv/decided";

std::string member_key(int64_t i) {
  return "rdzv/member/" + std::to_string(i);
}

std::string encode(const MemberInfo& m) {
  return nlohmann::json{
      {"rank", m.rank},     {"world_size", m.world_size},   {"local_rank", m.local_rank},
      {"run_id", m.run_id}, {"config_hash", m.config_hash}, {"host", m.host},
      {"pid", m.pid}}
      .dump();
}

MemberInfo decode(const std::string& s) {
  // Another process put it in the store: a flat object of a few fields.
  auto j = parse_json_bounded(s, JsonLimits{8, 64 << 10});
  MemberInfo m;
  m.rank = j.at("rank");
  m.world_size = j.at("world_size");
  m.local_rank = j.value("local_rank", -1);
  m.run_id = j.at("run_id");
  m.config_hash = j.at("config_hash");
  m.host = j.value("host", "");
  m.pid = j.value("pid", 0);
  return m;
}

// Groups ranks by a string attribute; the largest group (ties: first seen) is the reference.
template <class Key>
std::vector<std::pair<std::string, std::vector<int>>> group_by(const std::vector<MemberInfo>& ms,
                                                               Key key) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (auto& m : ms) {
    std::string k = key(m);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == k; });
    if (it == groups.end()) {
      groups.push_back({k, {m.rank}});
    } else {
      it->second.push_back(m.rank);
    }
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](auto& a, auto& b) { return a.second.size() > b.second.size(); });
  return groups;
}

// "rank 3 reports world size 8, ranks 0-2 report 4"
template <class Key>
void check_agreement(const std::vector<MemberInfo>& ms, WorldCheckFailure failure, const char* what,
                     const char* verb_one, const char* verb_many, Key key) {
  auto groups = group_by(ms, key);
  if (groups.size() <= 1) return;
  std::string msg = fmt::format("rendezvous failed: {} mismatch: ", what);
  auto part = [&](const std::pair<std::string, std::vector<int>>& g) {
    return fmt::format("{} {} {} {}", format_ranks(g.second),
                       g.second.size() == 1 ? verb_one : verb_many, what, g.first);
  };
  for (size_t i = 1; i < groups.size(); ++i) msg += part(groups[i]) + ", ";
  msg += part(groups[0]);
  throw WorldCheckError(failure, msg);
}

std::string who(const MemberInfo& m) {
  return fmt::format("pid {} on host {}", m.pid, m.host.empty() ? "?" : m.host);
}

}  // namespace

void validate_world(const std::vector<MemberInfo>& ms, int expected) {
  check_agreement(ms, WorldCheckFailure::kWorldSizeMismatch, "world size", "reports", "report",
                  [](const MemberInfo& m) { return std::to_string(m.world_size); });
  check_agreement(ms, WorldCheckFailure::kRunIdMismatch, "run id", "has", "have",
                  [](const MemberInfo& m) { return "'" + m.run_id + "'"; });
  check_agreement(ms, WorldCheckFailure::kConfigHashMismatch, "config hash", "has", "have",
                  [](const MemberInfo& m) { return m.config_hash; });
  const int world = ms.empty() ? expected : ms.front().world_size;
  for (auto& m : ms) {
    if (m.rank < 0 || m.rank >= world) {
      throw WorldCheckError(WorldCheckFailure::kRankOutOfRange,
                            fmt::format("rendezvous failed: rank {} ({}) is out of range for world "
                                        "size {} (allowed 0-{})",
                                        m.rank, who(m), world, world - 1));
    }
  }
  std::map<int, std::vector<const MemberInfo*>> by_rank;
  for (auto& m : ms) by_rank[m.rank].push_back(&m);
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (!by_rank.count(r)) missing.push_back(r);
  }
  for (auto& [rank, claim] : by_rank) {
    if (claim.size() < 2) continue;
    std::string procs;
    for (auto* m : claim) procs += (procs.empty() ? "" : ", ") + who(*m);
    throw WorldCheckError(
        WorldCheckFailure::kDuplicateRank,
        fmt::format("rendezvous failed: rank {} is claimed by {} processes ({}){}", rank,
                    claim.size(), procs,
                    missing.empty() ? std::string() : "; no process has " + format_ranks(missing)));
  }
  if (!missing.empty()) {
    throw WorldCheckError(WorldCheckFailure::kMissingRanks,
                          fmt::format("rendezvous failed: {} of {} ranks arrived; missing: {}",
                                      ms.size(), world, format_ranks(missing)));
  }
}

namespace {
// Marks this rank's verdict as taken, whatever it is, so the rank serving the store can wait for
// everyone to finish reading before it exits.
struct DecidedMark {
  StoreClient& store;
  ~DecidedMark() {
    try {
      store.add(kDecided, 1);
    } catch (const std::exception&) {  // the store is gone: nobody is left to wait for
    }
  }
};
}  // namespace

int64_t arrivals(StoreClient& store) {
  return store.add(kArrivals, 0);
}
int64_t decided(StoreClient& store) {
  return store.add(kDecided, 0);
}

World check_world(StoreClient& store, const MemberInfo& me, std::chrono::milliseconds timeout) {
  using steady = std::chrono::steady_clock;
  const auto start = steady::now();
  const auto deadline = start + timeout;
  int64_t index = store.add(kArrivals, 1) - 1;
  store.set(member_key(index), encode(me));
  DecidedMark mark{store};

  std::vector<MemberInfo> members;
  // Wait for as many members as the smallest world size anyone reports: enough to decide.
  auto target = [&] {
    int t = me.world_size;
    for (auto& m : members) t = std::min(t, m.world_size);
    return std::max(t, 1);
  };
  while (static_cast<int>(members.size()) < target()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    try {
      if (left.count() <= 0) throw StoreError(StoreErrorKind::kKeyTimeout, "deadline passed");
      members.push_back(decode(store.get(member_key(static_cast<int64_t>(members.size())), left)));
    } catch (const StoreError& e) {
      if (e.kind() != StoreErrorKind::kKeyTimeout) throw;
      // Report what arrived: a mismatch among those is more useful than "missing".
      try {
        validate_world(members, target());
      } catch (const WorldCheckError& w) {
        if (w.failure() != WorldCheckFailure::kMissingRanks) throw;
      }
      std::vector<int> present;
      for (auto& m : members) present.push_back(m.rank);
      std::vector<int> missing;
      for (int r = 0; r < target(); ++r) {
        if (std::find(present.begin(), present.end(), r) == present.end()) missing.push_back(r);
      }
      auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - start).count();
      throw WorldCheckError(
          WorldCheckFailure::kMissingRanks,
          fmt::format("rendezvous timed out after {} ms (timeout {} ms) at store {}: {} of {} "
                      "ranks arrived ({}); missing: {}",
                      waited, timeout.count(), store.endpoint(), members.size(), target(),
                      present.empty() ? std::string("none") : format_ranks(present),
                      format_ranks(missing)));
    }
  }
  validate_world(members, target());
  if (index >= static_cast<int64_t>(members.size())) {
    // More processes than the world: the world formed without this one, which holds a rank a
    // member already has (two launchers started the same ranks).
    const MemberInfo* holder = nullptr;
    for (auto& m : members) {
      if (m.rank == me.rank) holder = &m;
    }
    throw WorldCheckError(
        WorldCheckFailure::kDuplicateRank,
        fmt::format("rendezvous failed: rank {} is claimed by 2 processes ({}, pid {} on host {}): "
                    "this process arrived as number {} in a world of {} (more processes than the "
                    "world; was the job launched twice?)",
                    me.rank,
                    holder != nullptr ? fmt::format("pid {} on host {}", holder->pid, holder->host)
                                      : std::string("a member"),
                    me.pid, me.host, index + 1, members.size()));
  }
  World w;
  w.members.resize(members.size());
  for (auto& m : members) w.members[static_cast<size_t>(m.rank)] = m;
  return w;
}

}  // namespace fl::rdzv
