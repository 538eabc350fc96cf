// A fixture for Layers.AnIncludeAgainstTheLayeringIsReported: the harness must not include the
// workloads.
#include "workloads/train/trainer.hpp"
