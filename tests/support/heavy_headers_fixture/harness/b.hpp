// A header that includes gRPC itself.
#pragma once

#include <grpcpp/grpcpp.h>
