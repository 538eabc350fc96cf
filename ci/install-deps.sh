#!/usr/bin/env bash
# Installs the Debian packages faultline needs. Idempotent: installs only what is missing, and
# runs apt-get update only when something is. Run as root (or with sudo available).
#   ci/install-deps.sh             what building, testing and CI need
#   ci/install-deps.sh --nightly   and what only the nightly's checks need (ci/nightly.sh)
set -euo pipefail

nightly=0
for arg in "$@"; do
  case $arg in
    --nightly) nightly=1 ;;
    *) echo "install-deps: unknown argument '$arg' (allowed: --nightly)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  lld  # the `ci` preset's linker (CMakePresets.json; a third of GNU ld's link time)
  clang  # the `ci` preset's compiler (docs/build.md: the test files in under half of GCC's time)
  openmpi-bin libopenmpi-dev
  libpmix-dev  # the harness's PMIx server (harness/launch/pmix_server.cpp)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libboost-dev libboost-system-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libxxhash-dev
  python3 python3-grpcio python3-protobuf python3-venv python3-pip python3-setuptools python3-wheel
  # The live /metrics endpoint (prometheus-cpp, with civetweb) and the parser its test scrapes
  # with (issue 36).
  prometheus-cpp-dev python3-prometheus-client
  iproute2 iptables procps
  chromium fonts-dejavu-core
  # Real PyTorch on CPU ranks (gloo) for the torch suite and its two ctest runs (issue 21):
  # torch 1.13, torchrun included; about 48 MB to download, 630 MB installed with its
  # dependencies (161 packages, 85 s on the 2-core machine, --no-install-recommends).
  python3-torch
  # ctest suite.merge_shards parses metrics with prometheus_client's text parser;
  # scenarios.json_schema validates every scenario against docs/scenario.schema.json (issue 36).
  python3-prometheus-client python3-jsonschema python3-yaml
)
# ci/fr-trace-check.sh (ctest frtrace.pytorch_analyzer, the nightly): debootstrap builds a
# throwaway Debian sid root (it fetches with wget, a dependency) checked against the archive
# keyring; curl probes the mirror first. The root's own python3-torch comes from the mirror when
# the check runs, not from here.
NIGHTLY_PACKAGES=(debootstrap debian-archive-keyring curl)
if [ "$nightly" -eq 1 ]; then PACKAGES+=("${NIGHTLY_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
