// A header that reaches gRPC through another (ci/check_heavy_headers.py must report it).
#pragma once

#include "harness/b.hpp"
