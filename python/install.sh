#!/usr/bin/env bash
# Installs faultline_client and faultline_probe into a virtual environment, offline and without
# writing into the checkout: pip (setuptools) builds in the directory it installs from, leaving
# build/ and *.egg-info there, so it installs from a copy in a temporary directory instead.
#   python/install.sh VENV [PYTHON]
# VENV is created when missing, with --system-site-packages so it sees Debian's python3-grpcio and
# python3-protobuf. PYTHON defaults to /usr/bin/python3, Debian's interpreter: those packages (and
# python3-torch) are installed for it, not for another python3 that may come first on PATH
# (pyenv, conda), whose venv would see none of them (docs/detectors.md, "Python").
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: python/install.sh VENV [PYTHON]" >&2
  exit 2
fi
venv=$1
py=${2:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$here/pyproject.toml" "$here/README.md" "$here/faultline_client" "$here/faultline_probe" \
  "$tmp/"
find "$tmp" -name __pycache__ -prune -exec rm -rf {} +
if [ ! -x "$venv/bin/python" ]; then "$py" -m venv --system-site-packages "$venv"; fi
"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation --no-index "$tmp"
echo "python/install.sh: faultline_client installed into $venv (from a copy of $here)"
