#!/usr/bin/env bash
# ctest torch.*: a real PyTorch DDP job (Debian's python3-torch, gloo) under the harness as a
# command workload, reporting through the probe. Runs one scenario of scenarios/torch/ and checks
# the verdict (exit 0) and what the probe delivered into the history: every rank's hello and
# steps, the DDP bucket all-reduces as collective events, setup/step sections. Exit 77 (skipped)
# when the python3 has no torch.
#   tests/harness/torch_test.sh FAULTLINE_BIN SOURCE_DIR SCENARIO [--fix] [PYTHON]
set -euo pipefail
faultline=$1
src=$2
scenario=$3
fix=${4:-}
py=${5:-/usr/bin/python3}
if ! "$py" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  echo "SKIP: $py has no torch with gloo (Debian: python3-torch)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$faultline" run "$src/scenarios/torch/$scenario.yaml" $fix --results "$tmp" --run-id t -q || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "FAIL: faultline run $scenario $fix exited $rc"
  tail -n 30 "$tmp"/t/ranks/rank*/output.log || true
  exit 1
fi
"$py" - "$tmp/t/history.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
rank = [e for e in ev if e["source"] == "rank"]
for r in (0, 1):
    mine = [e for e in rank if e["rank"] == r]
    kinds = {e["kind"] for e in mine}
    need = {"hello", "step", "collective", "section", "heartbeat"}
    assert need <= kinds, f"rank {r}: probe events missing: {sorted(need - kinds)}"
    colls = [e["data"] for e in mine if e["kind"] == "collective"]
    assert any(c["op"] == "all_reduce" and c["group"] == "ddp" for c in colls), colls[:3]
    hello = [e["data"] for e in mine if e["kind"] == "hello"][0]
    assert hello["world_size"] == 2 and hello["via"] == "probe", hello
rej = [e for e in ev if e["kind"] == "events_rejected"]
assert not rej, rej
print("probe events:", len(rank))
PY
