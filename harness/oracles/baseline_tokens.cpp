// The baseline oracle's `measure: tokens`: an inference run's tokens, generate() call by call,
// against those of its reference run (which may have another topology: a tp 2 server against a
// single rank). The reference's tokens of a call are those of its lowest rank that reported the
// call; every rank of the run must match them. The first difference (lowest call, then request,
// then position) is the finding, with every rank that differs anywhere as the localisation.
#include <tuple>

#include <fmt/format.h>

#include "harness/oracles/oracle.hpp"

namespace fl::harness::oracles {
namespace {

using Generation = RunSummary::Generation;

// The reference's tokens per call: the lowest rank's.
std::map<int64_t, const Generation*> reference_calls(const RunSummary::Reference& ref) {
  std::map<int64_t, const Generation*> by_call;
  for (const auto& g : ref.generations) {
    auto& have = by_call[g.call];
    if (!have || g.rank < have->rank) have = &g;
  }
  return by_call;
}

struct Difference {
  size_t request = 0, position = 0;
  std::string run, ref;  // the tokens there ("none" past a sequence's end)
};

std::string token_at(const std::vector<std::vector<int32_t>>& t, size_t r, size_t i) {
  if (r >= t.size()) return "no request";
  return i < t[r].size() ? std::to_string(t[r][i]) : "none";
}

// The first position where `run` and `ref` differ (requests, then tokens), if any.
std::optional<Difference> first_difference(const Generation& run, const Generation& ref) {
  const size_t requests = std::max(run.tokens.size(), ref.tokens.size());
  for (size_t r = 0; r < requests; ++r) {
    const size_t a = r < run.tokens.size() ? run.tokens[r].size() : 0;
    const size_t b = r < ref.tokens.size() ? ref.tokens[r].size() : 0;
    for (size_t i = 0; i < std::max(a, b); ++i) {
      if (i < a && i < b && run.tokens[r][i] == ref.tokens[r][i]) continue;
      return Difference{r, i, token_at(run.tokens, r, i), token_at(ref.tokens, r, i)};
    }
  }
  return std::nullopt;
}

std::string describe(const Generation& g, const Difference& d) {
  const std::string where =
      static_cast<int>(d.position) >= g.prompt_len
          ? fmt::format("generated token {}", d.position - static_cast<size_t>(g.prompt_len))
          : std::string("prompt");
  return fmt::format("call {} request {} position {} ({}): token {}, the reference run's {}",
                     g.call, d.request, d.position, where, d.run, d.ref);
}

}  // namespace

Finding compare_tokens(const Expect& x, const RunSummary& f) {
  const auto ref = reference_calls(f.reference);
  if (ref.empty()) {
    Verdict v;
    v.outcome = "unknown";
    v.explanation =
        fmt::format("the reference run reported no generated tokens (see {})", f.reference.run_dir);
    return {std::nullopt, "", v};
  }
  const Generation* first = nullptr;
  Difference diff;
  std::set<int> differ, compared_ranks;
  size_t compared = 0;
  auto key = [](const Generation& g, const Difference& d) {
    return std::make_tuple(g.call, d.request, d.position, g.t);
  };
  for (const auto& g : f.generations) {
    if (!rank_ok(x, g.rank)) continue;
    const auto it = ref.find(g.call);
    if (it == ref.end()) continue;
    ++compared;
    compared_ranks.insert(g.rank);
    const auto d = first_difference(g, *it->second);
    if (!d) continue;
    differ.insert(g.rank);
    if (!first || key(g, *d) < key(*first, diff)) {
      first = &g;
      diff = *d;
    }
  }
  Finding out;
  if (first) {
    out.hit = Hit{first->t, -1, std::vector<int>(differ.begin(), differ.end()),
                  fmt::format("generated tokens differ from the reference run's: {}",
                              describe(*first, diff))};
    return out;
  }
  out.absent = fmt::format(
      "every generated token matches the reference run's ({} call(s) on {} rank(s) compared; "
      "the reference has {} call(s))",
      compared, compared_ranks.size(), ref.size());
  return out;
}

}  // namespace fl::harness::oracles
