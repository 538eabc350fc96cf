#!/usr/bin/env bash
# Configures and builds faultline with a CMake preset (default: "default"; CUDA when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${1:-default}"
cmake --preset "$PRESET"
cmake --build --preset "$PRESET" -j "$(nproc)"
