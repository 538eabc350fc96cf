#!/usr/bin/env bash
# slurm.sacct (called by slurm_test.sh with a local Slurm up WITH accounting: a private MariaDB,
# slurmdbd, the cluster registered, MinJobAge=2; SLURM_CONF exported; it stops everything after):
#   slurm_sacct_test.sh FAULTLINE_BIN SOURCE_DIR TMP
# The Slurm executor's `sacct` fallback against a real accounting database. A suite of five cases
# goes out as one array run one task at a time (--jobs 1), held (--sbatch-arg=--hold), with a
# time limit of one minute. The suite is then stopped (SIGSTOP) so that it cannot see its tasks
# end: the array is released, a-pass passes, b-fail fails its expectation (exit 1), c-timeout
# runs into the time limit, d-long is cancelled while it runs and e-never is cancelled pending
# (scancel of the whole array). Only once slurmctld has purged the finished
# array (scontrol show job: invalid job id) does the suite go on (SIGCONT): every state it learns
# now comes from sacct, and each case must be resolved with the right state, exit and node,
# none of them lost.
set -euo pipefail
faultline=$1 src=$2 tmp=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$src/tests/harness/history_lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export FAULTLINE_SLURM_POLL_MS=500
: "$src"

# wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds (every 0.5 s), or fail naming WHAT.
wait_for() {
  local limit=$1 what=$2
  shift 2
  for _ in $(seq $((limit * 2))); do
    "$@" && return 0
    sleep 0.5
  done
  fail "$what: not within $limit s"
}

mkdir -p "$tmp/s"
cat >"$tmp/s/a-pass.yaml" <<Y
name: a-pass
topology: {ranks: 1}
workload: {steps: 2}
expect: {oracle: completed}
Y
cat >"$tmp/s/b-fail.yaml" <<Y
name: b-fail
topology: {ranks: 1}
workload: {kind: command, command: ["false"], probe: false}
expect: {oracle: completed}
Y
for n in c-timeout d-long e-never; do
  cat >"$tmp/s/$n.yaml" <<Y
name: $n
topology: {ranks: 1}
workload: {kind: command, command: [sleep, "600"], probe: false}
expect: {oracle: completed}
Y
done

"$faultline" suite "$tmp/s" --executor slurm --jobs 1 --time-limit 1 --sbatch-arg=--hold --results "$tmp/r" \
  >"$tmp/suite.out" 2>&1 &
pid=$!
stopped=
# Never leave the suite stopped or running, whatever fails below.
trap 'if [[ -n $pid ]]; then kill -CONT "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi; true' EXIT

array_job() { job=$(squeue -h -o %F | head -1); [[ -n $job ]]; }
wait_for 60 "the suite's array in squeue" array_job
kill -STOP "$pid"
stopped=1
echo "array job $job submitted held; the suite is stopped"

scontrol release "$job"
# c-timeout runs until Slurm ends it at its time limit (a minute, checked every 30 s or so).
task_running() { squeue -h -t RUNNING -o %i | grep -qx "${job}_3"; }
wait_for 300 "d-long (task ${job}_3) running" task_running
# ... and its run launched its rank, so that the run itself has something to say when cancelled.
launched() {
  local f
  for f in "$tmp"/r/*-s/runs/d-long-s*/history.jsonl; do has_event "$f" launch && return 0; done
  return 1
}
wait_for 120 "d-long's rank launched" launched
scancel "$job"
gone_from_queue() { [[ -z $(squeue -h -j "$job" 2>/dev/null) ]]; }
wait_for 120 "the array leaving the queue" gone_from_queue
# MinJobAge=2: the controller forgets the finished array within its purge cycle.
purged() { ! scontrol show job -o "$job" >/dev/null 2>&1; }
wait_for 180 "slurmctld purging array job $job" purged
echo "slurmctld no longer knows job $job (scontrol show job: $(scontrol show job "$job" 2>&1 | head -1))"
echo "sacct now says:"
sacct -n -P -X -j "$job" -o JobID,State,ExitCode,ElapsedRaw,NodeList || true

kill -CONT "$pid"
set +e
wait "$pid"
status=$?
set -e
pid=
cat "$tmp/suite.out"
[[ $status -eq 1 ]] || fail "suite exit $status, want 1 (a case failed)"
python3 - "$(ls -d "$tmp"/r/*-s)" "$job" "$(hostname -s)" <<'PY'
import json, re, sys
d, job, node = sys.argv[1:]
s = json.load(open(d + "/summary.json"))
by = {c["scenario"]: c for c in s["cases"]}
task = lambda c: c["attempts"][0]["slurm_task"]
for c in s["cases"]:
    assert "LOST" not in c.get("explanation", "") and "LOST" not in task(c), c
assert by["a-pass"]["outcome"] == "pass", by["a-pass"]
assert task(by["a-pass"]) == f"{job}_0 COMPLETED", task(by["a-pass"])
b = by["b-fail"]
assert b["outcome"] == "fail", b
assert task(b) == f"{job}_1 FAILED", task(b)
assert json.load(open(b["run_dir"] + "/verdict.json"))["outcome"] == "fail"
t = by["c-timeout"]
assert t["outcome"] == "error", t
assert re.match(r"Slurm array task %s_2 \(c-timeout seed \d+\) ended TIMEOUT on %s; the run said: "
                % (job, node), t["explanation"]), t["explanation"]
assert task(t) == f"{job}_2 TIMEOUT", task(t)
c = by["d-long"]
assert c["outcome"] == "error", c
assert re.match(r"Slurm array task %s_3 \(d-long seed \d+\) ended CANCELLED on %s; the run said: "
                % (job, node), c["explanation"]), c["explanation"]
assert task(c) == f"{job}_3 CANCELLED", task(c)
n = by["e-never"]
assert n["outcome"] == "error", n
assert re.fullmatch(r"Slurm array task %s_4 \(e-never seed \d+\) ended CANCELLED; the run never "
                    r"started" % job, n["explanation"]), n["explanation"]
assert s["slurm"]["jobs"][0]["id"] == job and s["slurm"]["jobs"][0]["tasks"] == 5, s["slurm"]
assert s["counts"]["pass"] == 1 and s["counts"]["fail"] == 1 and s["counts"]["error"] == 3, s["counts"]
assert s["failed"] == 4 and s["interrupted"] == "", s
for name in sorted(by):
    print(name, by[name]["outcome"], task(by[name]), by[name].get("explanation", ""))
PY
[[ $(junit_attr "$(ls -d "$tmp"/r/*-s)/junit.xml" tests) == 5 ]] || fail "junit.xml"
exit 0
