#!/usr/bin/env bash
# Regenerates the gRPC/protobuf stubs that python/faultline_client vendors from
# harness/proto/faultline.proto (protoc + Debian's grpc_python_plugin), or, with --check, fails
# when the committed stubs differ from what the .proto generates now (ctest python.stubs_fresh).
# The proto is mapped to faultline_client/faultline.proto so the generated service module imports
# its messages as `from faultline_client import faultline_pb2` (inside the package).
#   python/gen_stubs.sh [--check] [PROTOC [GRPC_PYTHON_PLUGIN]]
set -euo pipefail
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
protoc=${1:-protoc}
plugin=${2:-$(command -v grpc_python_plugin || true)}
if [ -z "$plugin" ] || [ ! -x "$plugin" ]; then
  echo "gen_stubs: grpc_python_plugin not found (Debian: protobuf-compiler-grpc)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$protoc" "--proto_path=faultline_client=$root/harness/proto" --python_out="$tmp" \
  --grpc_out="$tmp" "--plugin=protoc-gen-grpc=$plugin" faultline_client/faultline.proto
stale=0
for f in faultline_pb2.py faultline_pb2_grpc.py; do
  if [ "$check" = 1 ]; then
    if ! cmp -s "$tmp/faultline_client/$f" "$here/faultline_client/$f"; then
      echo "gen_stubs: python/faultline_client/$f is stale against harness/proto/faultline.proto;" \
        "run python/gen_stubs.sh and commit the result" >&2
      stale=1
    fi
  else
    cp "$tmp/faultline_client/$f" "$here/faultline_client/$f"
  fi
done
exit $stale
