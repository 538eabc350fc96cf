// Logging: spdlog with a rank-tagged pattern. Every line a worker prints says which rank it is,
// because per-rank output is what log classifiers and humans read after a failure.
#pragma once

#include <spdlog/spdlog.h>

namespace fl::log {

// Sets the process-wide logger pattern to "[time] [rank R] [level] msg". rank < 0: "[harness]".
void init(int rank);

}  // namespace fl::log
