#!/usr/bin/env bash
# Builds and runs faultline's GPU tests, sanitizer checks, GPU scenarios and benchmark on a machine
# that has CUDA, NCCL, a C++ compiler, CMake and ninja but none of the project's Debian libraries
# (the lent GPU machine).
#
#   ci/device-kit.sh fetch          here: download the libraries' .debs into .devkit/debs and check
#                                   that they and the repository fit the device tool's 64 MiB
#   ci/device-kit.sh build          there: unpack them into .devkit/root (not /), configure the
#                                   CUDA build with the gRPC control plane, build everything (the
#                                   workers, the faultline CLI, tests, benchmarks) into build-gpu/
#   ci/device-kit.sh test [OUT]     there: gpu-tests, sanitize, suite and bench below, in order
#   ci/device-kit.sh gpu-tests [OUT]   ctest -L gpu
#   ci/device-kit.sh sanitize [OUT]    compute-sanitizer memcheck, racecheck and synccheck over the
#                                      CUDA op tests and a short training; error counts summarised
#   ci/device-kit.sh suite [OUT]       faultline suite scenarios/suites/gpu.yaml
#   ci/device-kit.sh bench [OUT]       bench/gpu_vs_pytorch.sh (fp32 and bf16 against PyTorch)
#   ci/device-kit.sh profile [OUT]     bench/gpu_profile.sh (where a step's time goes)
#   ci/device-kit.sh session [OUT]  there: build (the targets the checks run), bench, gpu-tests,
#                                   suite, sanitize, within SESSION_S seconds (default 540)
#   ci/device-kit.sh selftest       here (root): hide this machine's copies of those libraries in a
#                                   private mount namespace, build from the kit alone (JOBS=2 and
#                                   the targets it runs, unless JOBS/TARGETS say otherwise), train
#                                   on 2 CPU ranks and run a CPU scenario through the kit's faultline
#
# OUT defaults to build-gpu/gpu-results; every step logs there. .devkit is ignored by git
# (.git/info/exclude); name it in the device tool's `carry`: [".devkit/debs"].
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=.devkit
ROOT="$PWD/$KIT/root"
ARCH=x86_64-linux-gnu
LIMIT_MIB=64    # what the device tool carries: the working tree and the carried paths together
HEADROOM_MIB=4  # left for the repository growing and untracked files

# The libraries the workers, tests and benchmarks link and the headers they compile against, with
# Open MPI's runtime (mpirun, its plugins, their libraries). Toolchain packages are left out.
PACKAGES=(
  openmpi-bin openmpi-common libopenmpi-dev libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7
  libpmix-dev  # pmix.pc and headers: the harness hosts a PMIx server (harness/launch/pmix_server.cpp)
  libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm-infinipath1 libpsm2-2 librdmacm1 libibverbs1
  libnl-3-200 libnl-route-3-200 libnuma1 libltdl7 libmunge2 libxnvctrl0 libpciaccess0
  libboost1.74-dev libboost-system1.74-dev libboost-system1.74.0
  nlohmann-json3-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libxxhash-dev libxxhash0
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libquadmath0 libcli11-dev libgtest-dev libbenchmark-dev libbenchmark1debian pkgconf pkgconf-bin
  libpkgconf3
)
# The control plane and the harness: gRPC, protobuf (with protoc and grpc_cpp_plugin, run at build
# time), yaml-cpp, and what gRPC's CMake package links (abseil, re2, c-ares, OpenSSL, zlib); the
# live /metrics endpoint's prometheus-cpp, whose CMake package asks for civetweb (its targets name
# the civetweb program too, so that package comes along) and curl.
GRPC_PACKAGES=(
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29 libprotobuf-dev libprotobuf32
  libprotobuf-lite32 libprotoc32 protobuf-compiler protobuf-compiler-grpc libabsl-dev
  libabsl20220623 libre2-dev libre2-9 libc-ares-dev libc-ares2 libssl-dev libssl3 zlib1g-dev
  libyaml-cpp-dev libyaml-cpp0.7
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb-dev libcivetweb1 civetweb libcurl4-openssl-dev libcurl4
)

env_for_root() {
  export PATH="$ROOT/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$ROOT/usr/lib/$ARCH:$ROOT/usr/lib/$ARCH/openmpi/lib:$ROOT/usr/lib/$ARCH/openblas-pthread:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_LIBDIR="$ROOT/usr/lib/$ARCH/pkgconfig:$ROOT/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$ROOT"
  # Open MPI and PMIx relocated: their install paths are taken relative to these prefixes.
  export OPAL_PREFIX="$ROOT/usr"
  export PMIX_PREFIX="$ROOT/usr/lib/$ARCH/pmix2"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

out_dir() {
  OUT_DIR="${1:-build-gpu/gpu-results}"
  mkdir -p "$OUT_DIR"
  OUT_DIR="$(cd "$OUT_DIR" && pwd)"
}

mib() { echo $((($1 + 1048575) / 1048576)); }

# The kit and the tree that travels with it must fit the device tool's limit.
check_size() {
  local debs tree
  debs=$(du -sb "$KIT/debs" | cut -f1)
  tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2> /dev/null ||
    true) | awk '/\ttotal$/ {s += $1} END {print s + 0}')
  echo "device-kit: $(ls "$KIT/debs" | wc -l) packages, $(mib "$debs") MiB in $KIT/debs; the" \
    "working tree $(mib "$tree") MiB; together $(mib $((debs + tree))) MiB of the $LIMIT_MIB MiB" \
    "the device tool carries"
  if ((debs + tree > (LIMIT_MIB - HEADROOM_MIB) * 1048576)); then
    echo "device-kit: over $((LIMIT_MIB - HEADROOM_MIB)) MiB (the limit less $HEADROOM_MIB MiB" \
      "headroom): drop packages" >&2
    exit 1
  fi
}

# The static archives of the development packages (OpenBLAS's alone is 56 MiB unpacked) are never
# linked: each has a shared library of the same name in the kit, which the build prefers. Each
# .deb holding such an archive is repacked without it; static-only archives (GoogleTest's,
# benchmark_main) stay.
slim_debs() {
  local all f tmp a dropped
  all=$(for f in "$KIT"/debs/*.deb; do dpkg-deb -c "$f" | awk '{print $6}'; done)
  for f in "$KIT"/debs/*.deb; do
    dropped=0
    tmp=$(mktemp -d)
    dpkg-deb -R "$f" "$tmp/pkg"
    while read -r a; do
      if grep -qxF "./${a%.a}.so" <<< "$all"; then
        rm -f "$tmp/pkg/$a"
        dropped=$((dropped + 1))
      fi
    done < <(cd "$tmp/pkg" && find . -name 'lib*.a' -printf '%P\n')
    if ((dropped > 0)); then
      rm -f "$tmp/pkg/DEBIAN/md5sums"
      dpkg-deb -Zxz -b "$tmp/pkg" "$f" > /dev/null
    fi
    rm -rf "$tmp"
  done
}

# The error count of a compute-sanitizer log ("ERROR SUMMARY: N errors"; racecheck's "RACECHECK
# SUMMARY: H hazards displayed (N errors, W warnings)"), or "-" when the run did not get there.
sanitizer_errors() {
  local n
  n=$(grep -Eo "ERROR SUMMARY: [0-9]+ error|hazards displayed \([0-9]+ error" "$1" 2> /dev/null |
    tail -1 | grep -Eo "[0-9]+ error" | grep -Eo "[0-9]+" || true)
  echo "${n:--}"
}

# Seconds a step may take: its own cap, less when the session's deadline (DEADLINE, epoch seconds,
# set by `session`) comes sooner; 20 s are kept for packing the results.
run_limit() {
  local cap=$1 left
  [ -n "${DEADLINE:-}" ] || {
    echo "$cap"
    return
  }
  left=$((DEADLINE - $(date +%s) - 20))
  echo $((left < cap ? (left < 1 ? 1 : left) : cap))  # timeout 0 would mean no limit
}

step_gpu_tests() {
  (cd build-gpu && timeout "$(run_limit "${TESTS_S:-100000}")" ctest -L gpu --timeout "$(run_limit 300)" \
    --output-on-failure 2>&1) | tee "$OUT_DIR/ctest-gpu.log" || true
}

# compute-sanitizer over the CUDA op tests (minus the test that makes a kernel fault on purpose and
# the one that asks cudaMalloc for more than the card has: memcheck counts that refusal as an error)
# and a few steps of fl-train on one GPU, one log per tool and target, and a summary.
step_sanitize() {
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ ! -x "$cs" ]; then
    echo "device-kit: compute-sanitizer not found (PATH, /usr/local/cuda/bin)" |
      tee "$OUT_DIR/sanitizer-summary.txt"
    return 0
  fi
  local summary="$OUT_DIR/sanitizer-summary.txt" tool target log limit
  printf "%-10s %-12s %s\n" tool target errors > "$summary"
  for tool in memcheck racecheck synccheck; do
    for target in cuda_ops fl-train; do
      log="$OUT_DIR/sanitizer-$tool-$target.log"
      limit=$(run_limit "${SAN_TIMEOUT:-240}")
      if ((limit < 10)); then
        printf "%-10s %-12s %s\n" "$tool" "$target" "- (no time left)" >> "$summary"
        continue
      fi
      if [ "$target" = cuda_ops ]; then
        timeout "$limit" "$cs" --tool "$tool" --log-file "$log" \
          build-gpu/tests/cuda_ops_test --gtest_filter=-*StickyError*:*DeviceRefusal* > "$log.out" 2>&1 || true
      else
        RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_PORT=$((20000 + RANDOM % 20000)) \
          timeout "$limit" "$cs" --tool "$tool" --log-file "$log" \
          build-gpu/workloads/train/fl-train --model small --device cuda --steps 3 \
          --micro-batch 2 > "$log.out" 2>&1 || true
      fi
      printf "%-10s %-12s %s\n" "$tool" "$target" "$(sanitizer_errors "$log")" >> "$summary"
    done
  done
  cat "$summary"
}

step_suite() {
  timeout "$(run_limit "${SUITE_S:-100000}")" build-gpu/harness/faultline suite scenarios/suites/gpu.yaml --results "$OUT_DIR/suites" 2>&1 |
    tee "$OUT_DIR/suite-gpu.log" || true
}

step_bench() {
  OUT_DIR="$OUT_DIR" timeout "$(run_limit "${BENCH_S:-100000}")" bench/gpu_vs_pytorch.sh build-gpu 2>&1 | tee "$OUT_DIR/bench.log"
}

case "${1:-}" in
  fetch)
    mkdir -p "$KIT/debs"
    exclude="$(git rev-parse --git-path info/exclude)"
    mkdir -p "$(dirname "$exclude")"
    grep -qx "/$KIT/" "$exclude" 2> /dev/null || echo "/$KIT/" >> "$exclude"
    (cd "$KIT/debs" && apt-get download "${PACKAGES[@]}" "${GRPC_PACKAGES[@]}" 2>&1 |
      grep -v "^W: Download is performed unsandboxed" || true)
    slim_debs
    check_size
    ;;
  build)
    mkdir -p "$ROOT"
    for f in "$KIT"/debs/*.deb; do dpkg -x "$f" "$ROOT"; done
    # Debian's update-alternatives links (mpicc, mpirun, libopenblas) are not made by dpkg -x.
    for t in mpicc mpicxx mpirun mpiexec; do ln -sf "$t.openmpi" "$ROOT/usr/bin/$t"; done
    for f in "$ROOT/usr/lib/$ARCH/openblas-pthread/"libopenblas*.so*; do
      ln -sf "$f" "$ROOT/usr/lib/$ARCH/$(basename "$f")"
    done
    env_for_root
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFAULTLINE_CUDA=ON \
      -DFAULTLINE_GRPC=ON -DCMAKE_PREFIX_PATH="$ROOT/usr;$ROOT/usr/lib/$ARCH/cmake" \
      -DMPI_C_COMPILER="$ROOT/usr/bin/mpicc" -DMPIEXEC_EXECUTABLE="$ROOT/usr/bin/mpirun" \
      -DOPENBLAS_INCLUDE_DIR="$ROOT/usr/include/$ARCH/openblas-pthread" \
      -DCLI11_INCLUDE_DIR="$ROOT/usr/include" \
      -DOPENSSL_ROOT_DIR="$ROOT/usr" -DZLIB_ROOT="$ROOT/usr" \
      -DProtobuf_PROTOC_EXECUTABLE="$ROOT/usr/bin/protoc" \
      -DFAULTLINE_PROTOC="$ROOT/usr/bin/protoc" \
      -DFAULTLINE_GRPC_CPP_PLUGIN="$ROOT/usr/bin/grpc_cpp_plugin" \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
      -DCMAKE_UNITY_BUILD="${UNITY:-ON}" -DCMAKE_UNITY_BUILD_BATCH_SIZE=16
    # Unity batches of 16 as CI builds them (UNITY=OFF for one translation unit per file): each
    # header is parsed once per batch instead of once per file. Everything by default; JOBS and
    # TARGETS (space-separated) narrow it (the selftest does).
    # shellcheck disable=SC2086
    cmake --build build-gpu -j "${JOBS:-$(nproc)}" ${TARGETS:+--target $TARGETS}
    ;;
  test | gpu-tests | sanitize | suite | bench | profile)
    out_dir "${2:-}"
    env_for_root
    nvidia-smi > "$OUT_DIR/nvidia-smi.txt" 2>&1 || true
    case "$1" in
      test) step_gpu_tests && step_sanitize && step_suite && step_bench ;;
      gpu-tests) step_gpu_tests ;;
      sanitize) step_sanitize ;;
      suite) step_suite ;;
      bench) step_bench ;;
      profile) OUT_DIR="$OUT_DIR" bench/gpu_profile.sh build-gpu 2>&1 | tee "$OUT_DIR/profile.log" ;;
    esac
    ;;
  session)
    # Everything in one device call: build what the checks run, then the benchmark, the batch
    # scaling of bench/gpu_profile.sh (without Nsight), the gpu tests, the GPU suite and the
    # sanitizer, in that order, each bounded by what is left of
    # SESSION_S seconds (default 540). The logs are packed into OUT/results.tar.gz (the device
    # tool returns at most 8 files) beside OUT/session.txt, the step timings and the headline
    # results.
    start=$(date +%s)
    export DEADLINE=$((start + ${SESSION_S:-540}))
    out_dir "${2:-}"
    SESSION_OUT="$OUT_DIR"
    LOGS="$OUT_DIR/logs"
    mkdir -p "$LOGS"
    summary="$OUT_DIR/session.txt"
    stamp() { echo "$(($(date +%s) - start)) s: $*" | tee -a "$summary"; }
    pack() { tar -C "$SESSION_OUT" -czf "$SESSION_OUT/results.tar.gz" logs && rm -rf "$LOGS"; }
    trap pack EXIT
    nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1 || true
    stamp "start on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)," \
      "$(nproc) cores, $(cmake --version | head -1)"
    TARGETS="${TARGETS:-fl-train fl-infer fl-ckpt faultline cuda_ops_test gpu_train_test comm_gpu_test fl-bench-gpu-gemm}" \
      "$0" build > "$LOGS/build.log" 2>&1 || {
      stamp "build failed"
      tail -40 "$LOGS/build.log" | tee -a "$summary"
      exit 1
    }
    stamp "built"
    env_for_root
    OUT_DIR="$LOGS"
    BENCH_S="${BENCH_S:-150}" step_bench > /dev/null 2>&1 || stamp "bench failed (logs/bench.log)"
    sed -n '/^| precision/,$p' "$LOGS/bench.log" >> "$summary" || true
    stamp "bench done"
    # The step's fixed and per-sequence cost (tokens/s at micro-batch 8 and 32) and the per-op
    # GPU times of both sides (CUDA events; PyTorch's profiler): no Nsight needed.
    OUT_DIR="$LOGS/profile" NCU_S=0 timeout "$(run_limit "${SCALE_S:-150}")" \
      bench/gpu_profile.sh build-gpu 2>&1 | tee "$LOGS/profile.log" >> "$summary" || true
    stamp "batch scaling and op times done"
    TESTS_S="${TESTS_S:-180}" step_gpu_tests > /dev/null 2>&1
    grep -E "tests passed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Not Run|Skipped" "$LOGS/ctest-gpu.log" |
      tee -a "$summary" || true
    stamp "gpu tests done"
    SUITE_S="${SUITE_S:-90}" step_suite > /dev/null 2>&1
    tail -15 "$LOGS/suite-gpu.log" >> "$summary" || true
    stamp "suite done"
    SAN_TIMEOUT="${SAN_TIMEOUT:-60}" step_sanitize > /dev/null 2>&1
    cat "$LOGS/sanitizer-summary.txt" >> "$summary" || true
    stamp "sanitizer done"
    ;;
  selftest)
    [ "$(id -u)" -eq 0 ] || {
      echo "selftest needs root (mount namespace)"
      exit 2
    }
    [ -d "$KIT/debs" ] || {
      echo "selftest: run ci/device-kit.sh fetch first"
      exit 2
    }
    check_size
    exec unshare -m --propagation private "$0" selftest-inside
    ;;
  selftest-inside)
    # This machine's copies of what the kit carries, hidden: tmpfs over their directories,
    # /dev/null over their files (a bind mount over a symlink covers its target). Runtime
    # libraries the toolchain itself needs stay (libssl3, zlib1g: cmake and dpkg link them), and
    # so do their .so development links, which point at them; the build finds the kit's first
    # (OPENSSL_ROOT_DIR, ZLIB_ROOT, CMAKE_PREFIX_PATH). Their headers and static libraries are
    # hidden.
    hide() {
      local p
      for p in "$@"; do
        if [ -d "$p" ]; then
          mount -t tmpfs none "$p"
        elif [ -e "$p" ]; then mount --bind /dev/null "$p"; fi
      done
    }
    L=/usr/lib/$ARCH
    shopt -s nullglob
    hide /usr/include/boost /usr/include/fmt /usr/include/spdlog /usr/include/nlohmann \
      /usr/include/CLI /usr/include/gtest /usr/include/gmock /usr/include/benchmark \
      /usr/include/xxhash.h /usr/include/$ARCH/openblas-pthread /usr/include/$ARCH/openmpi \
      $L/openmpi $L/openblas-pthread $L/pmix2 $L/cmake /usr/share/cmake /usr/share/openmpi \
      /usr/bin/mpicc /usr/bin/mpirun /usr/bin/orterun /usr/bin/orted /usr/bin/opal_wrapper \
      $L/libmpi.so $L/libmpi.so.40 $L/libopen-pal.so.40 $L/libopen-rte.so.40 $L/libfmt.so.9 \
      $L/libspdlog.so.1.10 $L/libxxhash.so.0 $L/libopenblas.so.0 $L/libbenchmark.so.1debian \
      $L/libboost_system.so.1.74.0 $L/libpmix.so.2 $L/libhwloc.so.15
    hide /usr/include/grpc /usr/include/grpc++ /usr/include/grpcpp /usr/include/google/protobuf \
      /usr/include/absl /usr/include/re2 /usr/include/yaml-cpp /usr/include/openssl \
      /usr/include/$ARCH/openssl /usr/include/ares*.h /usr/include/zlib.h /usr/include/zconf.h \
      /usr/bin/protoc /usr/bin/grpc_cpp_plugin /usr/bin/grpc_python_plugin \
      $L/libgrpc* $L/libgpr.* $L/libupb.* $L/libaddress_sorting.* $L/libprotobuf* $L/libprotoc.* \
      $L/libabsl_* $L/libre2.* $L/libcares.* $L/libyaml-cpp.* $L/libssl.a $L/libcrypto.a $L/libz.a
    rm -rf build-gpu
    # What the checks below run, and the gpu tests (they must compile from the kit too).
    JOBS="${JOBS:-2}" TARGETS="${TARGETS:-fl-train fl-infer faultline cuda_ops_test gpu_train_test}" \
      "$0" build
    env_for_root
    echo "selftest: libraries the kit-built binaries resolve:"
    for b in build-gpu/workloads/train/fl-train build-gpu/harness/faultline; do
      ldd "$b" | grep -E "libmpi|libfmt|libopenblas|libxxhash|libspdlog|libgrpc|libprotobuf|libyaml|libabsl_base|libre2|libcares"
      if ldd "$b" | grep -q "not found"; then
        ldd "$b" | grep "not found"
        exit 1
      fi
    done
    MASTER_PORT=29611 mpirun --oversubscribe -np 2 build-gpu/workloads/train/fl-train --dp 2 --steps 3
    # One CPU scenario end to end through the kit-built harness (2 ranks, judged by its oracle).
    build-gpu/harness/faultline run scenarios/clean/clean-dp2-tp2.yaml --set topology.ranks=2 \
      --set topology.tp=1 --results build-gpu/selftest-runs
    echo "selftest: PASS"
    ;;
  *)
    sed -n 2,27p "$0"
    exit 2
    ;;
esac
