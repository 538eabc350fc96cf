#!/usr/bin/env bash
# ctest python.frozen_rank_detector: installs python/ (faultline_client) the way a Python user on
# Debian does, offline (python/install.sh: a venv over the system's python3-grpcio /
# python3-protobuf, pip from a copy with --no-deps --no-build-isolation --no-index; the checkout's
# python/ must not change), runs the frozen-rank scenario with the example
# detector on it and checks the history holds its diagnosis: symptom 4.11, ranks [2], with the
# flight-recorder dumps it asked for through Control in its evidence. The fix
# variant (the rank is resumed) must draw no such diagnosis, and in a run whose ranks fail (4.6)
# it reports their errors. Exit 77 (skipped) when the python3
# lacks grpc, protobuf, venv or setuptools.
#   tests/harness/python_client_test.sh FAULTLINE_BIN SOURCE_DIR [PYTHON]
set -euo pipefail
faultline=$1
src=$2
py=${3:-/usr/bin/python3}
if ! "$py" -c 'import grpc, google.protobuf, venv, ensurepip, setuptools' 2>/dev/null; then
  echo "SKIP: $py lacks grpc, protobuf, venv or setuptools (Debian: python3-grpcio" \
    "python3-protobuf python3-venv python3-setuptools)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The documented install (python/install.sh builds from a copy): the checkout stays as it was.
before=$(cd "$src/python" && find . -path '*/__pycache__' -prune -o -print | sort)
"$src/python/install.sh" "$tmp/venv" "$py"
after=$(cd "$src/python" && find . -path '*/__pycache__' -prune -o -print | sort)
if [ "$before" != "$after" ]; then
  echo "FAIL: installing the client changed python/ in the checkout:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
# The package is imported from the venv, not from the checkout.
(cd "$tmp" && "$tmp/venv/bin/python" -c 'import faultline_client, sys; \
  sys.exit(0 if faultline_client.__file__.startswith(sys.argv[1]) else \
  "faultline_client imported from " + faultline_client.__file__)' "$tmp/venv")

detector="$tmp/venv/bin/python $src/harness/detectors/examples/minimal_detector.py"
scenario=$src/scenarios/symptoms/4.11-frozen-rank.yaml
summary=$("$faultline" run "$scenario" --results "$tmp/runs" --run-id frozen -q --detector "$detector")
echo "$summary"
# The tool posts as example-py while the run knows it as "python" (its command's name): the
# summary credits it (its client sends the harness's name for it) and prints no "no diagnosis".
if ! grep -q "example-py" <<<"$summary" || grep -q "no diagnosis from" <<<"$summary"; then
  echo "FAIL: the summary should show example-py's diagnosis and no 'no diagnosis from' line" >&2
  exit 1
fi
"$faultline" run "$scenario" --fix --results "$tmp/runs" --run-id fixed -q --detector "$detector"
"$faultline" run "$src/scenarios/symptoms/4.6-dtype-mismatch-allreduce.yaml" --results "$tmp/runs" \
  --run-id errors -q --detector "$detector"
cat "$tmp/runs/frozen/tools/"*.log

"$tmp/venv/bin/python" - "$tmp/runs" <<'PY'
import json, sys

def diagnoses(run):
    with open(f"{sys.argv[1]}/{run}/history.jsonl", encoding="utf-8") as f:
        events = [json.loads(line) for line in f if line.strip()]
    return [e["data"] for e in events
            if e["kind"] == "diagnosis" and e["data"].get("detector") == "example-py"]

frozen = diagnoses("frozen")
hits = [d for d in frozen if d["symptom"] == "4.11" and d["ranks"] == [2]]
if not hits:
    sys.exit(f"FAIL: no example-py diagnosis of 4.11 on rank 2 in the frozen run: {frozen}")
print("frozen run:", hits[0]["evidence"])
# Before reporting it asked for every rank's flight-recorder dump (Control): the live ranks wait
# in the gradient all-reduce the stopped rank never joined; the stopped rank wrote none.
evidence = hits[0]["evidence"]
for want in ("flight recorder: rank 0 waits in nccl:all_reduce", "of group dp",
             "no dump from ranks [2]"):
    if want not in evidence:
        sys.exit(f"FAIL: '{want}' not in the frozen run's evidence: {evidence}")
fixed = [d for d in diagnoses("fixed") if d["symptom"] == "4.11"]
if fixed:
    sys.exit(f"FAIL: example-py diagnosed 4.11 in the fix variant (rank resumed): {fixed}")
print("fix variant: no 4.11 diagnosis")
errors = [d for d in diagnoses("errors") if d["symptom"] == "unknown" and d["evidence"]]
if not errors:
    sys.exit("FAIL: example-py posted no rank error (with its message) in the 4.6 run")
print("4.6 run: rank errors reported:", len(errors))
PY
