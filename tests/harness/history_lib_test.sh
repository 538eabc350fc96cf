#!/usr/bin/env bash
# history_lib.sh's answers on a hand-written history: kinds, fields at the top and in data,
# nested objects that a grep would take for events, a torn last line, a missing file, bad input.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
. "$src/tests/harness/history_lib.sh"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
h=$tmp/history.jsonl
cat >"$h" <<'J'
{"t":1,"source":"harness","kind":"run_start","data":{"nodes":2}}
{"t":2,"source":"harness","kind":"control","data":{"asked":{"kind":"launch"}}}
{"t":3,"source":"harness","kind": "launch","data":{"ranks":4}}
{"t":4,"source":"rank","rank":1,"kind":"step","data":{"step":3}}
{"t":5,"source":"harness","kind":"heal_error","data":{"fault":"disk_full","host":"h1","error":"x"}}
J
printf '%s' '{"t":6,"source":"rank","rank":0,"ki' >>"$h"  # a line still being written
[[ $(count_events "$h" launch) == 1 ]] || fail "launch: $(count_events "$h" launch), want 1"
# The grep this replaces takes line 2 (a nested object) for the launch and misses line 3.
[[ $(grep -n '"kind":"launch"' "$h" | cut -d: -f1) == 2 ]] || fail "the grep found other lines"
[[ $(count_events "$h" step source=rank rank=1) == 1 ]] || fail "step of rank 1"
[[ $(count_events "$h" step rank=0) == 0 ]] || fail "step of rank 0"
has_event "$h" heal_error fault=disk_full host=h1 || fail "heal_error of h1"
! has_event "$h" heal_error fault=disk_full host=h2 || fail "heal_error of h2"
[[ $(count_events "$h" '*') == 5 ]] || fail "all events: $(count_events "$h" '*')"
[[ $(count_events "$tmp/none.jsonl" launch) == 0 ]] || fail "a missing file has no events"
out=$(count_events "$h" launch ranks 2>&1) && fail "KEY without =VALUE accepted"
[[ $out == "count_events: 'ranks' is not KEY=VALUE" ]] || fail "message: $out"
printf '%s\n' '{"kind":"launch"}' 'torn{' '{"kind":"launch"}' >"$tmp/bad.jsonl"
out=$(count_events "$tmp/bad.jsonl" launch 2>&1) && fail "a broken line in the middle accepted"
[[ $out == "count_events: $tmp/bad.jsonl:2: not JSON: torn{" ]] || fail "message: $out"
printf '%s\n' '<?xml version="1.0"?>' '<testsuites tests="5" failures="1"><testsuite/></testsuites>' \
  >"$tmp/j.xml"
[[ $(junit_attr "$tmp/j.xml" tests) == 5 ]] || fail "junit tests"
echo "history_lib ok"
