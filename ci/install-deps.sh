#!/usr/bin/env bash
# Installs the Debian packages faultline needs. Idempotent: installs only what is missing, and
# runs apt-get update only when something is. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  openmpi-bin libopenmpi-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libboost-dev libboost-system-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libxxhash-dev
  python3 python3-grpcio python3-protobuf python3-venv python3-pip python3-setuptools python3-wheel
  iproute2 iptables procps
  chromium fonts-dejavu-core
  # Real PyTorch on CPU ranks (gloo) for the torch suite and its two ctest runs (issue 21):
  # torch 1.13, torchrun included; about 48 MB to download, 630 MB installed with its
  # dependencies (161 packages, 85 s on the 2-core machine, --no-install-recommends).
  python3-torch
)

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
