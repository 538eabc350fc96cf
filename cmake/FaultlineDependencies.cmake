# Third-party dependencies, all from Debian packages (ci/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(Boost 1.74 REQUIRED COMPONENTS system)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

# OpenBLAS: Debian ships the cblas header under an openblas-specific include directory.
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
        /usr/include/aarch64-linux-gnu/openblas-pthread)
find_library(OPENBLAS_LIBRARY NAMES openblas)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: run ci/install-deps.sh (package libopenblas-dev)")
endif()
add_library(faultline_openblas INTERFACE)
target_include_directories(faultline_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(faultline_openblas INTERFACE ${OPENBLAS_LIBRARY})

find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)

if(FAULTLINE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(FAULTLINE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

find_program(MPIEXEC_EXECUTABLE_FOUND NAMES mpirun mpiexec REQUIRED)

# The control plane (gRPC + protobuf) and scenarios (yaml-cpp). FAULTLINE_GRPC=OFF builds the
# workloads without them (the device machine has none of the Debian libraries): workers then keep
# their telemetry in their local JSONL files only, and the harness is not built.
option(FAULTLINE_GRPC "Build the gRPC control plane and the harness" ON)
set(FAULTLINE_HAVE_GRPC OFF)
if(FAULTLINE_GRPC)
  find_package(Protobuf REQUIRED)
  find_package(gRPC CONFIG REQUIRED)
  find_package(yaml-cpp REQUIRED)
  # The live /metrics endpoint of a run or suite (harness/control/metrics_endpoint.cpp): Debian's
  # prometheus-cpp-dev, linked into the control layer only.
  find_package(prometheus-cpp CONFIG REQUIRED)
  find_program(FAULTLINE_PROTOC protoc REQUIRED)
  find_program(FAULTLINE_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
  set(FAULTLINE_HAVE_GRPC ON)
endif()
