#!/usr/bin/env bash
# Configures and builds faultline with a CMake preset (default: "default"; CUDA when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${1:-default}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cmake --preset "$PRESET" 2>&1 | tee "$log"
# `default` builds with GCC and `ci` with clang, both in build/. When the compiler changes, CMake
# deletes the cache and configures again without the preset's other variables (its flags, lld,
# unity batches, benchmarks off); a second configure sets them.
if grep -q 'require your cache to be deleted' "$log"; then
  echo "ci/build.sh: the compiler changed; configuring again with the preset's variables"
  cmake --preset "$PRESET"
fi
cmake --build --preset "$PRESET" -j "$(nproc)"
