// Delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing Input",
// 2002): the ddmin algorithm over the indices 0..n-1 of a list, given a test that says whether a
// subset still shows the failure. It returns a 1-minimal subset: removing any one element of it
// loses the failure (as far as the test budget went). The test is never asked about the whole
// list (known to fail) or the empty one, and never twice about the same subset.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <set>
#include <vector>

namespace fl::harness::campaign {

struct DdminResult {
  std::vector<size_t> kept;
  int tests = 0;         // calls of `fails`
  bool stopped = false;  // `fails` asked to stop (a budget): `kept` is the best so far
};

// `fails(subset)` returns 1 when the subset still fails, 0 when it does not, -1 to stop.
inline DdminResult ddmin(size_t n, const std::function<int(const std::vector<size_t>&)>& fails) {
  DdminResult r;
  for (size_t i = 0; i < n; ++i) r.kept.push_back(i);
  std::set<std::vector<size_t>> tried;
  auto test = [&](const std::vector<size_t>& s) {
    if (s.empty() || s.size() == r.kept.size() || !tried.insert(s).second) return 0;
    ++r.tests;
    const int v = fails(s);
    if (v < 0) r.stopped = true;
    return v;
  };
  size_t granularity = 2;
  while (r.kept.size() >= 2 && !r.stopped) {
    const size_t size = r.kept.size(), g = std::min(granularity, size);
    std::vector<std::vector<size_t>> chunks(g);
    for (size_t i = 0; i < size; ++i) chunks[i * g / size].push_back(r.kept[i]);
    bool reduced = false;
    for (const auto& c : chunks) {  // a chunk alone fails: keep only it
      if (test(c) == 1) {
        r.kept = c;
        granularity = 2;
        reduced = true;
        break;
      }
      if (r.stopped) return r;
    }
    for (size_t k = 0; !reduced && g > 2 && k < g; ++k) {  // the rest without one chunk fails
      std::vector<size_t> rest;
      for (size_t j = 0; j < g; ++j) {
        if (j != k) rest.insert(rest.end(), chunks[j].begin(), chunks[j].end());
      }
      std::sort(rest.begin(), rest.end());
      if (test(rest) == 1) {
        r.kept = rest;
        granularity = std::max<size_t>(g - 1, 2);
        reduced = true;
      }
      if (r.stopped) return r;
    }
    if (!reduced) {
      if (g >= size) break;
      granularity = std::min(size, 2 * g);
    }
  }
  return r;
}

}  // namespace fl::harness::campaign
