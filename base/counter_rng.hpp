// Counter-based randomness: a value is a pure function of its key (seed, stream, index), so any
// rank can compute any element without sharing generator state, and a run replays exactly.
#pragma once

#include <cstdint>
#include <string_view>

namespace fl::rng {

// SplitMix64 finaliser: a bijective 64-bit mix.
constexpr uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a of a name, to key a stream by string.
constexpr uint64_t hash_name(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Uniform double in [0, 1) from a 64-bit value (its top 53 bits).
constexpr double to_unit(uint64_t x) {
  return static_cast<double>(x >> 11) / 9007199254740992.0;
}

}  // namespace fl::rng
