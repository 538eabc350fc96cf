#!/usr/bin/env bash
# Builds and runs faultline's GPU tests and benchmark on a machine that has CUDA, NCCL, a C++
# compiler, CMake and ninja but none of the project's Debian libraries (the lent GPU machine).
#
#   ci/device-kit.sh fetch          here: download the libraries' .debs into .devkit/debs
#   ci/device-kit.sh build          there: unpack them into .devkit/root (not /), configure the
#                                   CUDA build without the gRPC control plane, build the workers,
#                                   gpu tests and benchmarks into build-gpu/
#   ci/device-kit.sh test [OUT]     there: ctest -L gpu, then bench/gpu_vs_pytorch.sh; logs to OUT
#   ci/device-kit.sh selftest       here (root): hide this machine's copies of those libraries in a
#                                   private mount namespace, then build and train on 2 CPU ranks
#                                   with the kit alone
#
# .devkit is ignored by git (.git/info/exclude); name it in the device tool's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=.devkit
ROOT="$PWD/$KIT/root"
ARCH=x86_64-linux-gnu

# The libraries the workers, tests and benchmarks link and the headers they compile against, with
# Open MPI's runtime (mpirun, its plugins, their libraries). Toolchain packages are left out.
PACKAGES=(
  openmpi-bin openmpi-common libopenmpi-dev libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm-infinipath1 libpsm2-2 librdmacm1 libibverbs1
  libnl-3-200 libnl-route-3-200 libnuma1 libltdl7 libmunge2 libxnvctrl0 libpciaccess0
  libboost1.74-dev libboost-system1.74-dev libboost-system1.74.0
  nlohmann-json3-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libxxhash-dev libxxhash0
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5
  libcli11-dev libgtest-dev libbenchmark-dev libbenchmark1debian pkgconf pkgconf-bin libpkgconf3
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

case "${1:-}" in
  fetch)
    mkdir -p "$KIT/debs"
    exclude="$(git rev-parse --git-path info/exclude)"
    mkdir -p "$(dirname "$exclude")"
    grep -qx "/$KIT/" "$exclude" 2> /dev/null || echo "/$KIT/" >> "$exclude"
    (cd "$KIT/debs" && apt-get download "${PACKAGES[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
    echo "device-kit: $(ls "$KIT/debs" | wc -l) packages, $(du -sh "$KIT/debs" | cut -f1) in $KIT/debs"
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
      -DFAULTLINE_GRPC=OFF -DCMAKE_PREFIX_PATH="$ROOT/usr;$ROOT/usr/lib/$ARCH/cmake" \
      -DMPI_C_COMPILER="$ROOT/usr/bin/mpicc" -DMPIEXEC_EXECUTABLE="$ROOT/usr/bin/mpirun" \
      -DOPENBLAS_INCLUDE_DIR="$ROOT/usr/include/$ARCH/openblas-pthread" \
      -DCLI11_INCLUDE_DIR="$ROOT/usr/include" \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}"
    cmake --build build-gpu --target fl-train fl-infer cuda_ops_test gpu_train_test \
      kernels_test comm_gpu_test fl-bench-gpu-gemm
    ;;
  test)
    OUT_DIR="${2:-build-gpu/gpu-results}"
    mkdir -p "$OUT_DIR"
    env_for_root
    nvidia-smi | tee "$OUT_DIR/nvidia-smi.txt" || true
    (cd build-gpu && ctest -L gpu --output-on-failure 2>&1) | tee "$OUT_DIR/ctest-gpu.log" || true
    OUT_DIR="$OUT_DIR" bench/gpu_vs_pytorch.sh build-gpu 2>&1 | tee "$OUT_DIR/bench.log"
    ;;
  selftest)
    [ "$(id -u)" -eq 0 ] || { echo "selftest needs root (mount namespace)"; exit 2; }
    unshare -m --propagation private bash -euo pipefail -c '
      hide() { for p in "$@"; do
        if [ -d "$p" ]; then mount -t tmpfs none "$p"; elif [ -e "$p" ]; then mount --bind /dev/null "$p"; fi
      done; }
      L=/usr/lib/'"$ARCH"'
      hide /usr/include/boost /usr/include/fmt /usr/include/spdlog /usr/include/nlohmann         /usr/include/CLI /usr/include/gtest /usr/include/gmock /usr/include/benchmark         /usr/include/xxhash.h /usr/include/'"$ARCH"'/openblas-pthread /usr/include/'"$ARCH"'/openmpi         $L/openmpi $L/openblas-pthread $L/pmix2 $L/cmake /usr/share/cmake /usr/share/openmpi         /usr/bin/mpicc /usr/bin/mpirun /usr/bin/orterun /usr/bin/orted /usr/bin/opal_wrapper         $L/libmpi.so $L/libmpi.so.40 $L/libopen-pal.so.40 $L/libopen-rte.so.40 $L/libfmt.so.9         $L/libspdlog.so.1.10 $L/libxxhash.so.0 $L/libopenblas.so.0 $L/libbenchmark.so.1debian         $L/libboost_system.so.1.74.0 $L/libpmix.so.2 $L/libhwloc.so.15
      rm -rf build-gpu
      ci/device-kit.sh build
      ldd build-gpu/workloads/train/fl-train | grep -E "libmpi|libfmt|libopenblas|libxxhash|libspdlog"
      . <(sed -n "/^env_for_root()/,/^}/p" ci/device-kit.sh); ROOT='"$ROOT"' ARCH='"$ARCH"' env_for_root
      MASTER_PORT=29611 mpirun --oversubscribe -np 2 build-gpu/workloads/train/fl-train --dp 2 --steps 3
    '
    ;;
  *)
    sed -n 2,15p "$0"
    exit 2
    ;;
esac
