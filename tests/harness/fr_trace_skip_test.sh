#!/usr/bin/env bash
# ci/fr-trace-check.sh when the Debian mirror does not answer: one SKIP line that names the mirror
# and says what to do, and exit 77 (skipped, as ctest and ci/nightly.sh count it), before
# debootstrap runs. The mirror is a closed port on localhost (FR_TRACE_MIRROR): nothing is
# downloaded.
#   tests/harness/fr_trace_skip_test.sh SOURCE_DIR
set -euo pipefail
src=$1
[[ $(id -u) -eq 0 ]] || { echo "SKIP: the check probes the mirror only as root"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl (the check's probe)"; exit 77; }
tmp=$(mktemp -d /tmp/fr-trace-skip-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# A debootstrap that must not run (and stands in where none is installed): the probe comes first.
printf '#!/bin/sh\ntouch "%s/debootstrap-ran"\nexit 99\n' "$tmp" >"$tmp/debootstrap"
chmod +x "$tmp/debootstrap"
# A port nobody listens on: one the kernel just gave out and took back.
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mirror=http://127.0.0.1:$port/debian
rc=0
out=$(FR_TRACE_MIRROR=$mirror PATH="$tmp:$PATH" bash "$src/ci/fr-trace-check.sh" /nonexistent/faultline \
  "$src" 2>&1) || rc=$?
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -eq 77 ]] || fail "exit status $rc, expected 77 (skipped)"
[[ $(wc -l <<<"$out") -eq 1 ]] || fail "expected one line"
want_start="SKIP: the Debian mirror $mirror is not reachable (curl: (7) "
want_end="): give this machine access to it, set FR_TRACE_MIRROR to a mirror that is reachable, or pass a root built before as the third argument"
[[ $out == "$want_start"* ]] || fail "the line does not start with: $want_start"
[[ $out == *"$want_end" ]] || fail "the line does not end with: $want_end"
[[ ! -e $tmp/debootstrap-ran ]] || fail "debootstrap ran"
echo "PASS: an unreachable mirror is one SKIP line and exit 77"
