// A fixture for Layers.AnIncludeAgainstTheHarnessOrderIsReported: a fault kind must not include
// the run, which sits above faults/ inside harness/.
#include "harness/run/runner.hpp"
#include "harness/history/history.hpp"
