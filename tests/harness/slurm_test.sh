#!/usr/bin/env bash
# ctest slurm.sbatch_run: a real single-node Slurm (harness/slurm/local-slurm.sh: munged,
# slurmctld and slurmd with a generated configuration, loopback only) runs the harness as a batch
# job, the way docs/cluster.md's template does: `sbatch --wait` of `faultline run` with 4 ranks
# under mpirun inside the allocation. The job must succeed and the run (named after the job id)
# pass with every rank stepping. The daemons are stopped afterwards and none is left.
#   tests/harness/slurm_test.sh FAULTLINE_BIN SOURCE_DIR
# Exit 77 (skipped) without root, slurm-wlm or munge.
set -euo pipefail
faultline=$1 src=$2
tmp=$(mktemp -d /tmp/flslurm.XXXXXX)
cleanup() { bash "$src/harness/slurm/local-slurm.sh" down "$tmp/slurm" || true; rm -rf "$tmp"; }
trap cleanup EXIT
set +e
conf=$(bash "$src/harness/slurm/local-slurm.sh" up "$tmp/slurm")
status=$?
set -e
[[ $status -eq 77 ]] && exit 77
[[ $status -eq 0 ]] || { cat "$tmp"/slurm/*.log >&2 || true; exit 1; }
eval "$conf"
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$tmp/s.yaml" <<Y
name: slurm-batch
topology: {ranks: 4, launcher: mpirun}
workload: {steps: 3}
expect: {oracle: completed}
Y
cat >"$tmp/job.sh" <<J
#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id "job\$SLURM_JOB_ID" -q
J
chmod +x "$tmp/job.sh"
out=$(sbatch --wait --parsable -N1 -n4 -o "$tmp/job-%j.out" "$tmp/job.sh") || {
  cat "$tmp"/job-*.out >&2 || true
  fail "the batch job failed"
}
job=${out%%;*}
cat "$tmp/job-$job.out"
[[ -f $tmp/r/job$job/verdict.json ]] || fail "no run directory job$job"
python3 - "$tmp/r/job$job" <<'PY'
import json, sys
v = json.load(open(sys.argv[1] + "/verdict.json"))
assert v["outcome"] == "pass", v
ev = [json.loads(l) for l in open(sys.argv[1] + "/history.jsonl")]
steps = {e["rank"] for e in ev if e["source"] == "rank" and e["kind"] == "step"}
assert steps == {0, 1, 2, 3}, steps
print("sbatch run ok")
PY
bash "$src/harness/slurm/local-slurm.sh" down "$tmp/slurm"
for f in "$tmp"/slurm/*.pid; do [[ -e $f ]] && fail "a daemon is left: $f"; done
true
